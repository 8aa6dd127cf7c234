"""The released location rules, one frozen module each (overlap@1 and @2 share one: one rule,
two settings). A module's bytes are its identity: tests/test_scoring.py holds each to its
digest, and every grade a rule made cites its code hash. A new rule, or any change to one, is
a new version in a new file here, registered in props.core.scoring.scorers.SCORERS."""
