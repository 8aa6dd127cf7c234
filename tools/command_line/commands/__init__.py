"""The `props` sub-commands' parsers, one module per area: each adds its parsers
(`add_parser` or `add_parsers`) and names the handler of each command as
"module:function" (in `props.tools.command_line.handlers`, the demo or chaos). These modules import
nothing heavy (`tests/test_cli_handlers.py` checks it): `props X --help` starts fast."""
