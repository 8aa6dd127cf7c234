"""The handlers of the `props` sub-commands, one module per area (the parsers, in
`props.tools.commands`, name them as "props.tools.handlers.AREA:FUNCTION" and the CLI imports
the one module a command needs only once its arguments parsed)."""
