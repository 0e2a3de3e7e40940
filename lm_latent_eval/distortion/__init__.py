"""Distortion error (LeBrun et al. 2022): artificial language, perturbations, error curves, pipeline, plots."""
