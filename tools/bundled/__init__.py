"""Data that ships with props: the sample specimens, the scorers' labelled grading
cases, the plans of the demo and the first evaluation."""
