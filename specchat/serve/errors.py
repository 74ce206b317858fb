"""OpenAI-shaped errors: every failure is `{"error": {"message", "type", "param", "code"}}`.

OpenAI clients read `error.message` and show it to the user, so each message says what to
change. Nothing here ever returns a traceback; unexpected exceptions become a 500 whose
message names the exception type only.
"""

from __future__ import annotations

import sys
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

INVALID = "invalid_request_error"


class APIError(Exception):
    """An error answered to the client; raised anywhere a request handler runs."""

    def __init__(self, status: int, message: str, *, type: str = INVALID,
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def install(app: FastAPI) -> None:
    """Route every error path through the OpenAI shape."""

    @app.exception_handler(APIError)
    async def _api(request: Request, exc: APIError) -> JSONResponse:
        request.state.error = exc.message
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = str(exc.detail)
        if exc.status_code == 404:
            message = (f"no such endpoint {request.url.path}: specchat serves /v1/chat/"
                       "completions, /v1/completions, /v1/models and /health")
        return APIError(exc.status_code, message, code=code).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        print(f"specchat: error: {request.method} {request.url.path}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return APIError(500, f"internal error ({type(exc).__name__}); the server keeps "
                        "running, see its log", type="server_error").response()
