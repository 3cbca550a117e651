"""Model management: the local library of GGUF files and their draft pairings, the hub search and
the resumable, verified download, and the offline starter models. Needs no loaded model."""
