"""NeuMF on MovieLens-1M (He et al., "Neural Collaborative Filtering", WWW 2017), plain PyTorch.

As the paper's NeuMF (trained end to end, no pre-training) and the seed's configuration: GMF
factors 32, an MLP of 3 layers over concatenated user and item embeddings of ``32 * 2**2``
(256 -> 128 -> 64 -> 32), the prediction layer over both, binary cross-entropy on implicit
feedback (every rating is a positive), 4 sampled negatives per positive, drawn again every epoch.
Evaluation (the paper's protocol): each user's latest rating is held out and ranked among 99
items the user never rated; the metric is the hit ratio at 10 (HR@10), target 0.69.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iadeep.training._data import Ratings, load_movielens_ratings
from iadeep.training._task import DataSource, Task, seeded

__all__ = ["NeuMF", "build"]

NEGATIVES_PER_POSITIVE = 4
EVAL_CANDIDATES = 100  # the held-out item and 99 negatives
TOP_K = 10
_TINY_USERS = 64


class NeuMF(nn.Module):
    """Input user and item indices ``(B,)``; output logits ``(B,)``."""

    def __init__(self, users: int, items: int, factors: int = 32, layers: int = 3) -> None:
        super().__init__()
        mlp_dim = factors * 2 ** (layers - 1)
        self.gmf_user, self.gmf_item = nn.Embedding(users, factors), nn.Embedding(items, factors)
        self.mlp_user, self.mlp_item = nn.Embedding(users, mlp_dim), nn.Embedding(items, mlp_dim)
        mlp: list[nn.Module] = []
        width = 2 * mlp_dim
        for _ in range(layers):
            mlp += [nn.Linear(width, width // 2), nn.ReLU()]
            width //= 2
        self.mlp = nn.Sequential(*mlp)
        self.predict = nn.Linear(factors + width, 1)
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, std=0.01)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        gmf = self.gmf_user(user) * self.gmf_item(item)
        mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=-1))
        return self.predict(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


def _synthetic(seed: int, tiny: bool) -> Ratings:
    rng = seeded(seed, 3)
    users, per_user, items = (_TINY_USERS, 8, 300) if tiny else (6040, 165, 3706)
    u = np.repeat(np.arange(1, users + 1), per_user)
    i = np.concatenate([rng.choice(np.arange(1, items + 1), per_user, replace=False) for _ in range(users)])
    return Ratings(u, i, rng.integers(1, 6, len(u)), rng.integers(956_703_932, 1_046_454_590, len(u)))


class Recommendation(Task):
    """Leave-one-out implicit-feedback recommendation."""

    def __init__(self, source: DataSource, device: torch.device) -> None:
        if source.synthetic:
            ratings = _synthetic(source.seed, source.tiny)
        else:
            assert source.folder is not None
            ratings = load_movielens_ratings(source.folder)
            if source.tiny:
                keep = np.isin(ratings.users, np.unique(ratings.users)[:_TINY_USERS])
                ratings = Ratings(*(a[keep] for a in (ratings.users, ratings.items, ratings.ratings, ratings.timestamps)))
        user_ids, users = np.unique(ratings.users, return_inverse=True)
        item_ids, items = np.unique(ratings.items, return_inverse=True)
        self.n_users, self.n_items = len(user_ids), len(item_ids)
        if self.n_items <= EVAL_CANDIDATES:
            raise ValueError(f"MovieLens: {self.n_items} items, need more than {EVAL_CANDIDATES} to rank a held-out item")
        # Latest rating of each user (ties: the last in file order) is held out.
        order = np.lexsort((np.arange(len(users)), ratings.timestamps, users))
        last = np.r_[users[order][1:] != users[order][:-1], True]
        test = order[last]
        train = np.setdiff1d(np.arange(len(users)), test)
        self.pos_users, self.pos_items = users[train], items[train]
        self.seen = np.unique(users.astype(np.int64) * self.n_items + items)  # rated (user, item) pairs as keys
        self.test_users, self.test_items = users[test], items[test]
        self.seed, self.device = source.seed, device
        self.n_train = len(self.pos_users) * (1 + NEGATIVES_PER_POSITIVE)
        self.model = NeuMF(self.n_users, self.n_items).to(device)
        self._eval_items = self._eval_candidates()
        self.start_epoch(0)

    def _negatives(self, users: np.ndarray, per_user: int, rng: np.random.Generator) -> np.ndarray:
        """Items ``users[k]`` never rated, shape ``(len(users), per_user)`` (rejection sampling)."""
        out = rng.integers(0, self.n_items, (len(users), per_user))
        keys = users[:, None] * self.n_items + out
        bad = np.isin(keys, self.seen)
        while bad.any():
            out[bad] = rng.integers(0, self.n_items, int(bad.sum()))
            keys = users[:, None] * self.n_items + out
            bad = np.isin(keys, self.seen)
        return out

    def _eval_candidates(self) -> np.ndarray:
        rng = seeded(self.seed, 4)
        negatives = self._negatives(self.test_users, EVAL_CANDIDATES - 1, rng)
        return np.concatenate([self.test_items[:, None], negatives], axis=1)  # column 0 is the held-out item

    def start_epoch(self, epoch: int) -> None:
        rng = seeded(self.seed, 5, epoch)
        neg = self._negatives(self.pos_users, NEGATIVES_PER_POSITIVE, rng).reshape(-1)
        self.users = np.concatenate([self.pos_users, np.repeat(self.pos_users, NEGATIVES_PER_POSITIVE)])
        self.items = np.concatenate([self.pos_items, neg])
        self.labels = np.concatenate([np.ones(len(self.pos_users)), np.zeros(len(neg))]).astype(np.float32)

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return tuple(torch.from_numpy(a[indices]).to(self.device) for a in (self.users, self.items, self.labels))  # type: ignore[return-value]

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        user, item, label = batch
        return F.binary_cross_entropy_with_logits(self.model(user, item), label)

    def evaluate(self) -> float:
        self.model.eval()
        hits = 0
        with torch.no_grad():
            for start in range(0, len(self.test_users), 512):
                cand = torch.from_numpy(self._eval_items[start:start + 512]).to(self.device)
                users = torch.from_numpy(self.test_users[start:start + 512]).to(self.device)
                scores = self.model(users[:, None].expand_as(cand).reshape(-1), cand.reshape(-1)).view(cand.shape)
                # Rank of the held-out item (column 0): candidates scoring strictly higher.
                rank = (scores > scores[:, :1]).sum(dim=1)
                hits += int((rank < TOP_K).sum())
        self.model.train()
        return hits / len(self.test_users)


def build(source: DataSource, device: torch.device) -> Task:
    """NeuMF on MovieLens-1M."""
    return Recommendation(source, device)
