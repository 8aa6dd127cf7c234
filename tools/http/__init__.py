"""The HTTP side: the JSON API (`api/`) and the analysts' viewer (`viewer/`), each a
router set with its own errors, put together in one app (`app`) and served by `server`;
what both use (tokens, the store per request, input limits) beside them."""
