"""logparse: parse access logs into records and aggregate them."""
