"""The core of props, in three layers, each a package:

- `log`: the generic event store on PostgreSQL. It knows no event type of props.
- `domain`: what props is about (the catalog of events, specimens, definitions, tokens, the
  commands the CLI and the API share, export files). Imports `log`.
- `scoring`: scorers, re-scoring, comparison, grading on the server. Imports `log`, `domain`.

`tests/test_layers.py` fails on an import that goes the other way.
"""
