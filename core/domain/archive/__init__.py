"""The archive: signed export files of the log, and importing them back."""
