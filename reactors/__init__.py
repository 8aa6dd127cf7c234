"""Reactors: services that follow the log and act on it (launch critic containers, run the
graders, restart graders when a new grader image is pushed). Not built yet: the grading logic
they will run is in `props.core.scoring.scorers` and `props.core.scoring.rescoring`."""
