#!/usr/bin/env python3
"""transformers' references for running the decoder export fixtures under onnxruntime-genai's
KV-cache contract (`mobius optimize --kv-cache genai`): tests/fixtures/exports/<family>-<kind>/
genai.npz for every cache kind (dynamo-cache, legacy-cache, optimum-cache; the same checkpoint, so the same
file).

Developer tool only: needs torch and transformers (`/work/torchvenv/bin/python`); CI never runs
it, the files are committed. Re-running reproduces them byte for byte.

The rows are the two prompts of the fixture's reference.npz (row 0: its PAD_ROW_LEN real tokens,
row 1: all SEQ tokens), each continued by STEPS token ids drawn at random (seeded per family).
transformers (eager attention, f32) runs each row ALONE, unpadded, without a cache: its logits
are the true ones for every position, whatever padding or cache layout a runtime uses. The test
(tests/ort/test_exports.py) feeds the same rows batched in genai's layout: a right-padded prompt,
then STEPS decode steps with each row's new token written after its own valid keys.

genai.npz keys:
    row0.input_ids [PAD_ROW_LEN + STEPS] / row0.logits [PAD_ROW_LEN + STEPS, vocab]
    row1.input_ids [SEQ + STEPS]         / row1.logits [SEQ + STEPS, vocab]
    greedy.prompt [SEQ]      row 1's prompt
    greedy.tokens [GREEDY]   transformers' greedy continuation of it (argmax of the unpadded
                             no-cache forward, step by step), the end-of-sequence token never
                             picked (as onnxruntime-genai's min_length has it)
    greedy.margins [GREEDY]  top-1 minus top-2 logit at each greedy step (a tie risk below 1e-4)

Usage:
    python scripts/make_genai_references.py [--only FAMILY ...]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
EXPORTS = FIXTURES / "exports"
sys.path.insert(0, str(REPO / "scripts"))
from make_export_fixtures import DECODERS, OPTIMUM_DECODERS  # noqa: E402

FAMILIES = DECODERS + OPTIMUM_DECODERS
KINDS = ["dynamo-cache", "dynamo-noopt-cache", "legacy-cache", "optimum-cache"]
PAD_ROW_LEN, SEQ = 3, 5  # as scripts/make_export_fixtures.py
STEPS = 3
GREEDY = 8


def logits_of(model, ids: list[int]) -> np.ndarray:
    """[len(ids), vocab]: the unpadded, uncached forward of one row."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False)
    return out.logits[0].numpy().astype(np.float32)


def make(family: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / family, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    folders = [EXPORTS / f"{family}-{kind}" for kind in KINDS if (EXPORTS / f"{family}-{kind}" / "reference.npz").is_file()]
    assert folders, f"no cache export of {family} in {EXPORTS}"
    # every cache kind holds the same prompt (scripts/make_export_fixtures.py)
    with np.load(folders[0] / "reference.npz") as ref:
        prompt = ref["prefill.input_ids"]
        mask = ref["prefill.attention_mask"]
    assert mask[0].tolist() == [1] * PAD_ROW_LEN + [0] * (SEQ - PAD_ROW_LEN) and mask[1].all()
    vocab = model.config.get_text_config().vocab_size
    rng = np.random.default_rng(sum(map(ord, family)) + 7)
    new = rng.integers(3, vocab, size=(2, STEPS)).astype(np.int64)
    rows = [np.concatenate([prompt[0, :PAD_ROW_LEN], new[0]]), np.concatenate([prompt[1], new[1]])]
    arrays: dict[str, np.ndarray] = {}
    for r, ids in enumerate(rows):
        arrays[f"row{r}.input_ids"] = ids
        arrays[f"row{r}.logits"] = logits_of(model, ids.tolist())
    seq = prompt[1].tolist()
    eos = model.config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    tokens, margins = [], []
    for _ in range(GREEDY):
        last = logits_of(model, seq)[-1]
        last[[e for e in eos if e is not None]] = -np.inf
        top2 = np.sort(last)[-2:]
        tokens.append(int(np.argmax(last)))
        margins.append(float(top2[1] - top2[0]))
        seq.append(tokens[-1])
    arrays["greedy.prompt"] = prompt[1]
    arrays["greedy.tokens"] = np.array(tokens, dtype=np.int64)
    arrays["greedy.margins"] = np.array(margins, dtype=np.float32)
    # np.savez_compressed stamps the zip members with the current time: write them at a fixed
    # time so that re-running reproduces the file byte for byte.
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    data = _fixed_time_zip(buf.getvalue())
    for folder in folders:
        (folder / "genai.npz").write_bytes(data)
        print(f"wrote {folder / 'genai.npz'}")


def _fixed_time_zip(data: bytes) -> bytes:
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, src.read(info.filename))
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=FAMILIES, help="families (default: all)")
    args = ap.parse_args()
    torch.manual_seed(0)
    for family in args.only or FAMILIES:
        make(family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
