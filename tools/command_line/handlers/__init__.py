"""The handlers of the `props` sub-commands, one module per area (the parsers, in
`props.tools.command_line.commands`, name them as "AREA:FUNCTION", AREA a module here, and
the CLI imports the one module a command needs only once its arguments parsed)."""
