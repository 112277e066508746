"""Callbacks for training frameworks: cnnergy.integrations.lightning.EnergyCallback (PyTorch
Lightning) and cnnergy.integrations.transformers.EnergyCallback (Hugging Face Trainer). Each
framework is imported only when its module is; both share EnergyLog (framework-independent)."""
from ._core import EnergyLog

__all__ = ["EnergyLog"]
