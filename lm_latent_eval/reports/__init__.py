"""Reporting: the τ × peeking × aggregation sweep (``sweep``) and plots of IS evaluations (``plots``)."""
