"""csvtool: quick summaries of CSV files from the command line."""

__version__ = "0.4.1"
