"""The terminal chat: conversation state, persistence, slash commands, REPL, rendering."""
