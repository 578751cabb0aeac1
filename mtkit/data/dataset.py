"""The binarized dataset on disk: flat token-id arrays with offsets, memory-mapped on load.

A DATA_DIR holds, per split and language, `SPLIT.LANG.bin` (every sentence's ids, end to
end, in the smallest unsigned dtype that holds the vocabulary) and `SPLIT.LANG.idx`
(int64 offsets, one more than there are sentences), plus `manifest.json`, the
tokenizer file(s), and `SPLIT.LANG.txt`, the raw text of valid/test splits.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from mtkit.core.config import ModelConfig
from mtkit.core.errors import MtkitError
from mtkit.text.tokenizer import Tokenizer

MANIFEST = "manifest.json"


Leads = tuple[tuple[int, ...], tuple[int, ...]]  # the ids before every source, and before every target


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


class SentenceWriter:
    """Appends sentences of ids to `PREFIX.bin` and their end offsets to `PREFIX.idx`, streaming."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.name = Path(prefix).name
        self.dtype = dtype
        self._bin = open(f"{prefix}.bin", "wb")
        self._idx = open(f"{prefix}.idx", "wb")
        self._end = 0
        self._idx.write(np.zeros(1, dtype=np.int64).tobytes())
        self.sentences = 0
        self._content = hashlib.blake2b(digest_size=16)  # of every sentence's ids, in order

    @property
    def digest(self) -> str:
        """A digest of the content written: equal for equal sentences, whatever the files' history."""
        return self._content.hexdigest()

    def add_many(self, sentences: list[list[int]]) -> None:
        if not sentences:
            return
        lengths = np.fromiter((len(ids) for ids in sentences), dtype=np.int64, count=len(sentences))
        flat = np.fromiter((i for ids in sentences for i in ids), dtype=self.dtype, count=int(lengths.sum()))
        self._bin.write(flat.tobytes())
        ends = self._end + np.cumsum(lengths)
        self._idx.write(ends.tobytes())
        self._content.update(lengths.tobytes())
        self._content.update(flat.tobytes())
        self._end = int(ends[-1])
        self.sentences += len(sentences)

    @property
    def tokens(self) -> int:
        return self._end

    def close(self) -> None:
        self._bin.close()
        self._idx.close()


class SentenceArray:
    """Read-only view of one `PREFIX.bin`/`PREFIX.idx` pair: `array[i]` is sentence i's ids. `lead`:
    ids that start every sentence as if they were stored with it (a model's language token)."""

    def __init__(self, prefix: Path, dtype: np.dtype, lead: tuple[int, ...] = ()):
        self.offsets = np.memmap(f"{prefix}.idx", dtype=np.int64, mode="r")  # file-backed pages, like the ids
        size = int(self.offsets[-1])
        self.ids = (
            np.memmap(f"{prefix}.bin", dtype=dtype, mode="r", shape=(size,)) if size else np.zeros(0, dtype=dtype)
        )
        self.lead = np.asarray(lead, dtype=np.int64)
        self.lengths = sentence_lengths(self.offsets) + len(lead)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        stored = self.ids[self.offsets[index] : self.offsets[index + 1]]
        return np.concatenate([self.lead.astype(stored.dtype), stored]) if len(self.lead) else stored

    def padded(self, indices: np.ndarray, prefix: int | None, suffix: int | None, pad: int) -> np.ndarray:
        """Sentences `indices` as one right-padded (B, L) int64 array, each with `prefix` before and
        `suffix` after it where given: gathered in a few array operations, not a sentence at a time."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        shift = int(prefix is not None)
        longest = int(lengths.max()) if len(indices) else 0
        out = np.full((len(indices), longest + shift + int(suffix is not None)), pad, dtype=np.int64)
        lead = len(self.lead)
        inside = np.arange(longest - lead)[None, :] < (lengths - lead)[:, None]
        rows, columns = np.nonzero(inside)
        out[rows, columns + shift + lead] = self.ids[self.offsets[indices][rows] + columns]
        if lead:
            out[:, shift : shift + lead] = self.lead
        if prefix is not None:
            out[:, 0] = prefix
        if suffix is not None:
            out[np.arange(len(indices)), lengths + shift] = suffix
        return out


def sentence_lengths(offsets: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """Each sentence's length from its end offsets, as int32 (4 bytes a sentence of private memory,
    a chunk at a time: at 45M sentences an int64 difference would take 360 MB more)."""
    lengths = np.empty(len(offsets) - 1, dtype=np.int32)
    for start in range(0, len(lengths), chunk):
        lengths[start : start + chunk] = np.diff(offsets[start : start + chunk + 1])
    return lengths


def read_manifest(data_dir: Path) -> dict:
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise MtkitError(f"{data_dir}: not an mtkit dataset (no {MANIFEST}; run mtkit preprocess first)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise MtkitError(f"{path}: damaged manifest ({err})") from None


def dataset_digest(manifest: dict) -> str:
    """What identifies a dataset: its manifest (which holds each file's content digest) without the
    seconds preprocessing took and the version that ran it, so that copies and reruns compare equal."""
    content = {key: value for key, value in manifest.items() if key not in ("seconds", "mtkit_version")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def sample_count(manifest: dict) -> int:
    """How many encodings of the training split a dataset holds (preprocess --samples)."""
    return manifest.get("sampling", {}).get("samples", 1)


def sample_split(k: int) -> str:
    """The split name of the training set's k-th BPE-dropout sample (0: train itself)."""
    return "train" if k == 0 else f"train.sample{k}"


class ParallelDataset:
    """One split of a binarized dataset: `dataset[i]` is (source ids, target ids) without specials."""

    def __init__(self, data_dir: Path, split: str, manifest: dict | None = None, leads: Leads = ((), ())):
        """manifest: the dataset's, where the caller has read it already; leads: the ids that start
        every source and every target (SentenceArray's lead)."""
        self.data_dir = Path(data_dir)
        self.manifest = manifest if manifest is not None else read_manifest(self.data_dir)
        samples = {sample_split(k) for k in range(sample_count(self.manifest))}
        if split not in self.manifest["splits"] and split not in samples:
            raise MtkitError(f"{data_dir}: has no {split} split (it has {', '.join(self.manifest['splits'])})")
        self.split = split
        dtype = np.dtype(self.manifest["dtype"])
        self.src = SentenceArray(self.data_dir / f"{split}.{self.src_lang}", dtype, leads[0])
        self.tgt = SentenceArray(self.data_dir / f"{split}.{self.tgt_lang}", dtype, leads[1])

    @property
    def src_lang(self) -> str:
        return self.manifest["src_lang"]

    @property
    def tgt_lang(self) -> str:
        return self.manifest["tgt_lang"]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.src[index], self.tgt[index]

    @property
    def src_lengths(self) -> np.ndarray:
        return self.src.lengths

    @property
    def tgt_lengths(self) -> np.ndarray:
        return self.tgt.lengths

    def raw_lines(self, side: str) -> list[str]:
        """The raw text of a valid/test split ('src' or 'tgt'), as it was given to preprocess."""
        lang = self.src_lang if side == "src" else self.tgt_lang
        path = self.data_dir / f"{self.split}.{lang}.txt"
        if not path.is_file():
            raise MtkitError(f"{path}: missing (raw text is kept for valid and test splits only)")
        return path.read_text(encoding="utf-8").split("\n")[:-1]


class TrainingSamples:
    """The training split's K encodings (preprocess --samples K) as one dataset: pair i of sample k
    is index k x N + i, so batches, lengths and collation work on it unchanged; epoch e trains on
    sample e mod K (see mtkit.data.batching.BatchStream). With K = 1 it is the train split itself."""

    def __init__(self, data_dir: Path, manifest: dict | None = None, temperature: float = 1.0, leads: Leads = ((), ())):
        """temperature: the corpora's sampling temperature (see tempered); leads: ParallelDataset's."""
        manifest = manifest if manifest is not None else read_manifest(data_dir)
        count = sample_count(manifest)
        self.samples = [ParallelDataset(data_dir, sample_split(k), manifest, leads) for k in range(count)]
        self.pairs = len(self.samples[0])
        if any(len(sample) != self.pairs for sample in self.samples):
            raise MtkitError(f"{data_dir}: damaged dataset (its training samples differ in length)")
        # One array over every sample's pairs (index k x N + i); without BPE-dropout samples, the split's own
        self.src_lengths = (
            np.concatenate([s.src_lengths for s in self.samples]) if self.samples[1:] else self.samples[0].src_lengths
        )
        self.tgt_lengths = (
            np.concatenate([s.tgt_lengths for s in self.samples]) if self.samples[1:] else self.samples[0].tgt_lengths
        )
        self.src_lang, self.tgt_lang = self.samples[0].src_lang, self.samples[0].tgt_lang
        # The corpora the training split joins, in order, with their weights (one, weight 1, before there were several)
        self.corpora = tempered(
            manifest.get("corpora") or [{"name": "train", "kept": self.pairs, "weight": 1}], temperature
        )
        self.languages = model_languages(manifest)

    def __len__(self) -> int:
        return self.pairs

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        sample, pair = divmod(index, self.pairs)
        return self.samples[sample][pair]

    def target_ids(self, vocab_size: int, chunk: int = 1 << 24) -> np.ndarray:
        """Every id that occurs on the target side of any sample, sorted; counted a chunk at a time,
        so that a large corpus is never copied whole."""
        seen = np.zeros(vocab_size, dtype=bool)
        for sample in self.samples:
            for start in range(0, len(sample.tgt.ids), chunk):
                seen |= np.bincount(sample.tgt.ids[start : start + chunk], minlength=vocab_size) > 0
        return np.flatnonzero(seen)

    def locate(self, indices: np.ndarray) -> list[tuple[ParallelDataset, np.ndarray, np.ndarray]]:
        """Where pairs `indices` are: (the sample, the pairs' indices in it, their rows in `indices`),
        one entry per sample they come from (one, for an epoch's batch)."""
        sample, pair = np.divmod(np.asarray(indices, dtype=np.int64), self.pairs)
        return [(self.samples[k], pair[sample == k], np.flatnonzero(sample == k)) for k in np.unique(sample)]

    def epoch_sample(self, epoch: int, seed: int = 0) -> tuple[int, np.ndarray | None, np.ndarray, np.ndarray]:
        """What epoch `epoch` trains on: the index offset of its sample (BPE-dropout), the pairs of
        that sample it takes (None: each once) and those pairs' source and target lengths."""
        k = epoch % len(self.samples)
        src_lengths, tgt_lengths = self.samples[k].src_lengths, self.samples[k].tgt_lengths
        pairs = weighted_pairs(self.corpora, seed, epoch)
        if pairs is None:
            return k * self.pairs, None, src_lengths, tgt_lengths
        return k * self.pairs, pairs, src_lengths[pairs], tgt_lengths[pairs]


def tempered(corpora: list[dict], temperature: float) -> list[dict]:
    """The corpora with the weights that give corpus i a share of each epoch proportional to
    (w_i n_i)^(1/T), n_i its pairs and w_i its weight, in an epoch of as many pairs as the weights
    give (fairseq's temperature sampling, Arivazhagan et al., 2019): T = 1 leaves the weights as they
    are, a larger T favours the smaller corpora (a multilingual dataset's rarer directions)."""
    if temperature == 1:
        return corpora
    sizes = np.array([corpus["weight"] * corpus["kept"] for corpus in corpora], dtype=np.float64)
    powered = np.where(sizes > 0, sizes, 0) ** (1 / temperature)
    shares = powered / powered.sum() if powered.sum() else powered
    return [
        {**corpus, "weight": float(share * sizes.sum() / corpus["kept"]) if corpus["kept"] else 0.0}
        for corpus, share in zip(corpora, shares)
    ]


def weighted_pairs(corpora: list[dict], seed: int, epoch: int) -> np.ndarray | None:
    """An epoch's pairs when the corpora have sampling weights: a corpus of weight w contributes
    every pair floor(w) times and a random fraction w - floor(w) of its pairs once more, drawn anew
    each epoch from (seed, epoch); weight 0 leaves it out. None when every weight is 1."""
    if all(corpus["weight"] == 1 for corpus in corpora):
        return None
    parts, start = [], 0
    for number, corpus in enumerate(corpora):
        pairs, (whole, fraction) = corpus["kept"], divmod(corpus["weight"], 1)
        indices = np.arange(start, start + pairs, dtype=np.int64)
        parts += [indices] * int(whole)
        if fraction:
            rng = np.random.default_rng([seed, epoch, number])
            parts.append(np.sort(rng.choice(indices, size=round(fraction * pairs), replace=False)))
        start += pairs
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def model_languages(manifest: dict) -> dict:
    """What a model trained on this dataset says of its languages (its file's meta): a bilingual
    dataset's pair; a multilingual one's directions and target tags (mtkit.text.targets), and its source
    language where every direction has the same one."""
    if "directions" not in manifest:
        return {"src_lang": manifest["src_lang"], "tgt_lang": manifest["tgt_lang"]}
    sources = {s for s, _ in manifest["directions"]}
    return {
        "src_lang": next(iter(sources)) if len(sources) == 1 else None,
        "tgt_lang": None,
        "target_tags": manifest["target_tags"],
        "directions": manifest["directions"],
    }


def load_tokenizers(data_dir: Path, manifest: dict | None = None) -> tuple[Tokenizer, Tokenizer]:
    """The source and target tokenizers stored in a dataset (the same object when the vocabulary is joint)."""
    manifest = manifest if manifest is not None else read_manifest(data_dir)
    src = Tokenizer.load(Path(data_dir) / manifest["src_tokenizer"]["file"])
    if manifest["tgt_tokenizer"]["file"] == manifest["src_tokenizer"]["file"]:
        return src, src
    return src, Tokenizer.load(Path(data_dir) / manifest["tgt_tokenizer"]["file"])


def check_tokenizers_match(
    data_dir: Path, src_sha256: str, tgt_sha256: str, what: str, manifest: dict | None = None
) -> None:
    """Refuse a dataset built with other tokenizers than `what` (a checkpoint, a model) uses."""
    manifest = manifest if manifest is not None else read_manifest(data_dir)
    if (manifest["src_tokenizer"]["sha256"], manifest["tgt_tokenizer"]["sha256"]) != (src_sha256, tgt_sha256):
        raise MtkitError(
            f"{data_dir}: built with a different tokenizer than {what} "
            f"(dataset sha256 {manifest['src_tokenizer']['sha256'][:12]}, {what} {src_sha256[:12]})"
        )


def open_splits(
    data_dir: Path, model_cfg: ModelConfig, manifest: dict, temperature: float = 1.0, leads: Leads = ((), ())
) -> tuple[TrainingSamples, ParallelDataset | None]:
    """The train split (all its samples, its corpora drawn at `temperature`) and (if any) the valid
    split of a dataset with this manifest, each sentence after its side's lead; fills the model's
    vocabulary sizes in from it."""
    model_cfg.src_vocab_size = manifest["src_tokenizer"]["vocab_size"]
    model_cfg.tgt_vocab_size = manifest["tgt_tokenizer"]["vocab_size"]
    model_cfg.joint_vocab = bool(manifest["joint_vocab"])
    valid = ParallelDataset(data_dir, "valid", manifest, leads) if "valid" in manifest["splits"] else None
    return TrainingSamples(data_dir, manifest, temperature, leads), valid
