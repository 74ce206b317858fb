"""JSON schemas from requests (response formats, tool parameters, `--schema`), checked before
any answer and used to validate answers and tool-call arguments, as data: they never make
specchat open a URL or a file, and checking them is bounded in time and memory.

- `$ref` (and `$dynamicRef`, `$recursiveRef`) may only point inside the schema's own document
  ("#/$defs/X", "#/definitions/X", "#anchor"); every other reference is refused up front, and
  the registry validation resolves through retrieves nothing.
- Patterns run on RE2 (linear time, bounded memory); one RE2 cannot compile (lookaround,
  backreferences, a repetition over 1000) is refused up front. Python's backtracking `re`,
  which jsonschema would use, never sees request data.
- Nesting and the work of one validation are bounded: a schema deeper than MAX_DEPTH is
  refused, and a validation that takes more than BUDGET keyword steps (a cycle of references,
  an exponential anyOf) ends as "too costly" instead of running on.

Pure: no llama_cpp, no I/O. Callers run it off the server's event loop.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

MAX_DEPTH = 64  # levels of objects and lists; real schemas use a handful
BUDGET = 20_000  # keyword evaluations per validation: about a second at most (docs/security.md)
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")
_RE2_MEMORY = 8 << 20  # bytes one compiled pattern may use (RE2's own default)
# ECMA-262's \uXXXX (JSON Schema's pattern dialect) in RE2's spelling, \x{XXXX}.
_ECMA_U = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


class SchemaProblem(ValueError):
    """Why a schema is refused, in one line; `where` is a JSON-pointer-like path in it."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = _short(where, 80)  # names a request chose: kept short


class TooCostly(Exception):
    """A validation ran past its BUDGET."""


# --- the up-front check --------------------------------------------------------------------

def check(schema: Any) -> None:
    """SchemaProblem unless `schema` is a JSON schema specchat can validate with safely."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaProblem("a JSON schema must be an object (or true/false)")
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        raise SchemaProblem("$schema must be a string", "$schema")
    refs = _walk(schema)
    # No metaschema check: jsonschema takes about a millisecond per subschema for 2020-12's,
    # which a request of megabytes would turn into minutes. A keyword of the wrong type is
    # refused by the grammar compiler before the answer, and is a problem in first_error.
    registry, base = _crawled(_base_class(schema), schema)
    resolver = registry.resolver(base_uri=base)
    for where, ref in _distinct(refs):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise SchemaProblem(f"$ref {_short(ref)!s} points at nothing in this schema: a "
                                "reference must name a part of the schema itself, like "
                                "#/$defs/Name", where) from None


def _walk(schema: dict[str, Any]) -> list[tuple[str, str]]:
    """Every local reference in `schema` (where, ref), after refusing what is not allowed:
    too deep, references out of the document, a nested $schema or $id, a bad pattern."""
    refs: list[tuple[str, str]] = []
    # A node's place is a link (key, parent's link), spelled out only for a message: one
    # string per node would cost more than the walk itself.
    stack: list[tuple[Any, Any, int]] = [(schema, None, 0)]
    has_pattern_properties = has_unevaluated = False
    while stack:
        value, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaProblem(f"the schema nests deeper than {MAX_DEPTH} levels", _path(at))
        if isinstance(value, list):
            stack.extend((item, (i, at), depth + 1) for i, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        for key in _REFS:
            ref = value.get(key)
            if isinstance(ref, str):
                if not ref.startswith("#"):
                    raise SchemaProblem(
                        f"{key} {_short(ref)} is refused: a schema may only refer to its own "
                        "parts (#/$defs/Name), never to a URL, a file or another document",
                        _path((key, at)))
                refs.append((_path((key, at)), ref))
        if depth and isinstance(value.get("$schema"), str):
            raise SchemaProblem("$schema is only allowed at the top of a schema",
                                _path(("$schema", at)))
        if depth and isinstance(value.get("$id"), str):
            raise SchemaProblem("$id is only allowed at the top of a schema (references "
                                "are resolved within the one document)", _path(("$id", at)))
        if isinstance(value.get("pattern"), str):
            pattern(value["pattern"], _path(("pattern", at)))
        props = value.get("patternProperties")
        if isinstance(props, dict):
            has_pattern_properties = True
            for key in props:
                pattern(key, _path(("patternProperties", at)))
        has_unevaluated = has_unevaluated or "unevaluatedProperties" in value
        stack.extend((item, (key, at), depth + 1) for key, item in value.items())
    if has_pattern_properties and has_unevaluated:
        raise SchemaProblem("unevaluatedProperties together with patternProperties is not "
                            "supported: use additionalProperties")
    return refs


def _path(at: Any) -> str:
    """A link (key, parent's link) as a JSON-pointer-like path, each key shortened."""
    keys: list[str] = []
    while at is not None:
        key, at = at
        keys.append(_short(str(key), 40))
    return "".join(f"/{key}" for key in reversed(keys))


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether objects and lists in `value` nest deeper than `limit` levels (iteratively:
    no recursion, however deep)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return False


@functools.lru_cache(maxsize=512)
def pattern(text: str, where: str = "") -> re2._Regexp[str]:
    """A schema's pattern compiled on RE2; SchemaProblem when RE2 cannot run it."""
    options = re2.Options()
    options.log_errors = False  # the refusal is ours to report, once
    options.max_mem = _RE2_MEMORY
    try:
        return re2.compile(_ECMA_U.sub(r"\1\\x{\2}", text), options)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise SchemaProblem(f"pattern {_short(text)} cannot be used ({_short(why)}): "
                            "patterns run on a linear-time engine, without lookaround or "
                            "backreferences", where) from None


# --- validation ----------------------------------------------------------------------------

def validator(schema: Any) -> Validator:
    """A validator for `schema` (which check() has passed): RE2 for every pattern, local
    references only, every keyword counted against the budget."""
    base = _base_class(schema)
    return _safe_class(base)(schema, registry=_crawled(base, schema)[0])


def first_error(check_with: Validator, instance: Any) -> str | None:
    """The first problem of `instance` (its place and what is wrong), or None when valid;
    a validation past its budget or nesting limit is a problem too."""
    _spent.count = 0
    try:
        errors = sorted(check_with.iter_errors(instance), key=lambda e: list(e.absolute_path))
    except TooCostly:
        return "the schema is too costly to check against this value"
    except RecursionError:
        return "the value or the schema's references nest too deeply to check"
    except referencing.exceptions.Unresolvable as exc:
        return f"the schema refers to something it does not hold ({_short(str(exc))})"
    except Exception as exc:  # noqa: BLE001 - a keyword of the wrong type (no metaschema check)
        return f"the schema cannot be applied ({type(exc).__name__}: {_short(str(exc))})"
    if not errors:
        return None
    where = "/".join(str(p) for p in errors[0].absolute_path) or "the top level"
    return f"at {where}: {_short(errors[0].message)}"


def is_valid(check_with: Validator, instance: Any) -> bool:
    return first_error(check_with, instance) is None


_spent = threading.local()


def _spend() -> None:
    count = getattr(_spent, "count", 0) + 1
    _spent.count = count
    if count > BUDGET:
        raise TooCostly


def _counted(keyword: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
    def run(validator: Any, value: Any, instance: Any, schema: Any
            ) -> Iterator[ValidationError]:
        _spend()
        yield from keyword(validator, value, instance, schema) or ()
    return run


def _pattern(validator: Any, text: str, instance: Any, schema: Any
             ) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not pattern(text).search(instance):
        yield ValidationError(f"{_short(repr(instance))} does not match {text!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for text, subschema in patterns.items():
        for key, value in instance.items():
            if pattern(text).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=text)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any
                           ) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    texts = list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in known
              and not any(pattern(text).search(key) for text in texts)]
    if validator.is_type(allowed, "object"):
        for key in extras:
            yield from validator.descend(instance[key], allowed, path=key)
    elif not allowed and extras:
        names = ", ".join(sorted(repr(k) for k in extras))
        yield ValidationError(f"additional properties are not allowed ({_short(names)} "
                              f"{'was' if len(extras) == 1 else 'were'} unexpected)")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any
                  ) -> Iterator[ValidationError]:
    """uniqueItems in linear time (jsonschema compares every pair of a list it cannot
    sort): each item as a hashable value, equal exactly when JSON Schema calls two items
    equal (1 and 1.0 are, true and 1 are not)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{_short(repr(instance))} has non-unique elements")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return (type(value) is str, value)  # numbers compare by value, 1 == 1.0


_REPLACED: dict[str, Callable[..., Iterator[ValidationError]]] = {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties, "uniqueItems": _unique_items}


@functools.cache
def _safe_class(base: type[Validator]) -> type[Validator]:
    keywords = {name: _counted(_REPLACED.get(name) or fn) for name, fn in
                base.VALIDATORS.items()}
    return jsonschema.validators.extend(base, keywords)


def _base_class(schema: Any) -> type[Validator]:
    cls: type[Validator] = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator)
    return cls


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


@functools.cache
def _registry() -> referencing.Registry[Any]:
    """A registry that retrieves nothing: only what a schema holds resolves."""
    return referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _crawled(cls: type[Validator], schema: Any) -> tuple[referencing.Registry[Any], str]:
    """The refusing registry holding `schema` with its anchors found once (else every lookup
    of an anchor walks the whole schema again), and the schema's base URI."""
    specification = referencing.jsonschema.specification_with(
        str(cls.META_SCHEMA.get("$schema", "")), default=referencing.Specification.OPAQUE)
    resource = specification.create_resource(schema)
    base = resource.id() or ""
    return _registry().with_resource(base, resource).crawl(), base


def _distinct(refs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each reference once (with the first place it appears)."""
    seen: dict[str, str] = {}
    for where, ref in refs:
        seen.setdefault(ref, where)
    return [(where, ref) for ref, where in seen.items()]


def _short(text: str, limit: int = 120) -> str:
    """One line, at most `limit` characters: request text quoted in an error stays small."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

