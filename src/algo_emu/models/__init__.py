"""Emulator models."""
