"""The `props` sub-commands, one module per area: each adds its parsers (`add_parser` or
`add_parsers`) and holds the handlers they dispatch to. Handlers are thin: they parse, call
the domain's services and the read models, and print."""
