"""Contrastive entropy (Arora & Rangarajan 2016): the seeded noisy channel (``channel``), H_C and R (``entropy``), plots."""
