"""The API's routes, one router per area: health, runs, scores."""
