"""The command line: the parsers (`commands/`), their handlers (`handlers/`), and what
they print with (tables that fit, progress, the run log, the report's tables)."""
