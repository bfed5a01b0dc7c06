"""Adapters: turn a raw batch of one modality into tokens and the mask they attend under."""
