"""The analysts' web viewer: runs, a run's transcript and issues against the code, scores,
comparisons and the review queue, rendered on the server (Jinja2) in the API's FastAPI app.

Every page reads what `props.projections` and the log say (the same read models as the CLI
and the JSON API); the only writes are people's verdicts, through `props.core.scoring.reviews`.
Pages work without JavaScript; `static/viewer.js` only adds keyboard shortcuts and the theme
switch. Nothing is fetched from elsewhere: the stylesheet and the script ship in the package.
"""
