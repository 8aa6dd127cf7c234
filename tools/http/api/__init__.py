"""The backend service's HTTP side: the JSON API and the image registry proxy.

Both are ASGI apps hosted by `props serve --http/--registry` next to the reactors. Neither
writes projections: requests become events, reads come from projections (and a run's
timeline from the log). Every request carries a token (see props.core.domain.tokens).
"""
