"""Scoring: what each reported issue is against the ground truth, and the figures after.

The scorers (`scorers`: overlap, tiered, human verdicts; `llm_judge`: LLM judges and
panels) and the one seam each is graded through (`verdicts`), their registration and
activation (`registration`), re-scoring recorded runs
(`rescoring`), the comparison of two scorers (`comparison`), intervals, grading on the
server by the SQL overlap rule (`server_grading`), and the evaluation of scorers on labelled
cases (`evaluation`).

May import: `props.core.log`, `props.core.domain`, `props.schema`.
"""
