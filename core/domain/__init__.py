"""The domain: what props records and what may be asked of it.

The catalog of events, one module per stream category (`catalog`); stream names and
NAME@VERSION (`streams`); specimens and their sync into the log; agent definitions; API
tokens; the commands the CLI and the API both call (`run_requests`); export files, their
signatures and archival; and `store.open_store()`, the log opened with the catalog.

May import: `props.core.log`, `props.schema`.
"""
