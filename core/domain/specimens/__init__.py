"""Specimens: the code under review, its fixes and the datasets they come from."""
