"""A 2-layer LSTM character-level language model on WikiText-2 (plain PyTorch: torchvision has none).

As the seed's ``lstm.py``: characters (lower-cased) with an end-of-line token, sequences of 30
characters predicting the next character, an embedding of 128, two LSTM layers of 128 units with
dropout 0.3 and layer normalisation of the embedding, a linear decoder, gradient-norm clip 0.1.
Metric: validation perplexity per character, ``exp(mean cross-entropy)``; target 4.0.

Notations:
    L: sequence length (30); B: batch size; V: vocabulary size (characters of the training split,
    plus ``<eos>`` and ``<unk>``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iadeep.training._data import load_wikitext2
from iadeep.training._task import TINY_EVAL, TINY_TRAIN, DataSource, Task, seeded

__all__ = ["CharLSTM", "build", "SEQUENCE_LENGTH"]

#: Characters per training sequence (the seed's ``--sequence_length``).
SEQUENCE_LENGTH = 30
_EOS, _UNK = "<eos>", "<unk>"


class CharLSTM(nn.Module):
    """Embedding -> LayerNorm -> 2-layer LSTM -> Linear; input ``(L, B)`` token ids, output ``(L, B, V)`` logits."""

    def __init__(self, vocab: int, width: int = 128, layers: int = 2, dropout: float = 0.3) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.rnn = nn.LSTM(width, width, layers, dropout=dropout)
        self.decoder = nn.Linear(width, vocab)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.norm(self.drop(self.encoder(x))))
        return self.decoder(self.drop(out))


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    for line in text.lower().splitlines():
        out.extend(line)
        out.append(_EOS)
    return out


def _synthetic_text(seed: int, chars: int) -> str:
    rng = seeded(seed, 2)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz ,.'\n"))
    return "".join(alphabet[rng.integers(0, len(alphabet), chars)])


class LanguageModel(Task):
    """Next-character prediction over non-overlapping sequences of the training text."""

    def __init__(self, source: DataSource, device: torch.device) -> None:
        if source.synthetic:
            chars = (TINY_TRAIN + 1) * SEQUENCE_LENGTH if source.tiny else 2_000_000
            splits = {"train": _synthetic_text(source.seed, chars), "valid": _synthetic_text(source.seed + 1, chars // 10)}
        else:
            assert source.folder is not None
            splits = load_wikitext2(source.folder)
        train_tokens, valid_tokens = _tokens(splits["train"]), _tokens(splits["valid"])
        if source.tiny:
            train_tokens = train_tokens[: (TINY_TRAIN + 1) * SEQUENCE_LENGTH]
            valid_tokens = valid_tokens[: (TINY_EVAL + 1) * SEQUENCE_LENGTH]
        self.vocab = sorted(set(train_tokens) | {_UNK})
        index = {t: i for i, t in enumerate(self.vocab)}
        unk = index[_UNK]
        self.train_ids = np.array([index[t] for t in train_tokens], dtype=np.int64)
        self.valid_ids = np.array([index.get(t, unk) for t in valid_tokens], dtype=np.int64)
        self.n_train = (len(self.train_ids) - 1) // SEQUENCE_LENGTH
        if self.n_train < 1 or len(self.valid_ids) <= SEQUENCE_LENGTH:
            raise ValueError(f"WikiText-2 text too short for sequences of {SEQUENCE_LENGTH} characters")
        self.device = device
        self.model = CharLSTM(len(self.vocab)).to(device)

    def _sequences(self, ids: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = starts[None, :] + np.arange(SEQUENCE_LENGTH)[:, None]  # (L, B)
        x = torch.from_numpy(ids[offsets]).to(self.device)
        y = torch.from_numpy(ids[offsets + 1]).to(self.device)
        return x, y

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sequences(self.train_ids, indices * SEQUENCE_LENGTH)

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = self.model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def evaluate(self) -> float:
        self.model.eval()
        starts = np.arange(0, len(self.valid_ids) - SEQUENCE_LENGTH, SEQUENCE_LENGTH)
        total, count = 0.0, 0
        with torch.no_grad():
            for chunk in np.array_split(starts, max(1, len(starts) // 256)):
                x, y = self._sequences(self.valid_ids, chunk)
                logits = self.model(x)
                total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
                count += y.numel()
        self.model.train()
        return math.exp(total / count)


def build(source: DataSource, device: torch.device) -> Task:
    """The character-level LSTM language model on WikiText-2."""
    return LanguageModel(source, device)
