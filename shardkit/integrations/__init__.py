"""Integrations with training frameworks: :mod:`.lightning` (a LightningDataModule)."""
