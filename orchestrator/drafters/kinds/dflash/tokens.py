"""DFlash rules on the mask token: in the drafter's vocabulary, not a token the target's
tokenizer already means something by, and its embedding shipped when the drafter needs it."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.drafters.findings import Finding
from orchestrator.drafters.kinds.dflash.drafter import MASK, DrafterInputs, is_int
from orchestrator.drafters.modelfiles import text_config


def mask_token_findings(c: DrafterInputs) -> Iterator[Finding]:
    if not isinstance(c.drafter.get("dflash_config"), dict):
        return  # reported by target_layer_id_findings
    mask = c.dflash.get("mask_token_id")
    expected = c.profile.mask_token_id if c.profile else None
    if not is_int(mask):
        state = "missing" if mask is None else "not an integer token id"
        yield Finding.error(
            MASK,
            f"mask_token_id {state}: masked block positions need the token the drafter was "
            "trained with; use the profile's id",
            expected=expected,
            actual=mask,
        )
        return
    vocab = c.target.get("vocab_size")
    if is_int(vocab) and not 0 <= mask < vocab:
        yield Finding.error(
            MASK,
            f"mask_token_id outside the target's vocabulary 0..{vocab - 1}: "
            "vLLM cannot embed it; use the profile's id",
            expected=expected if expected is not None else f"an id in 0..{vocab - 1}",
            actual=mask,
        )
    if c.tokenizer is not None:
        yield from _mask_in_tokenizer(mask, c.tokenizer, expected)
    role = _reserved_token_ids(c.target_top, c.tokenizer).get(mask)
    if role:
        yield Finding.error(
            MASK,
            f"mask_token_id is the target's {role} token: real text contains it, so the "
            "drafter cannot tell masked positions apart; use the profile's id",
            expected=expected,
            actual=mask,
        )
    if c.profile is not None and mask != c.profile.mask_token_id:
        yield Finding.error(
            MASK,
            "mask_token_id differs from the published drafter: the drafter was trained with "
            "its own mask token and acceptance collapses; use the profile's id",
            expected=c.profile.mask_token_id,
            actual=mask,
        )


def _mask_in_tokenizer(mask: int, tokenizer: dict, expected: int | None) -> Iterator[Finding]:
    """A mask must be a special added token, or an unused embedding row past all added tokens."""
    added = _added_tokens(tokenizer)
    token = added.get(mask)
    if token is not None and token.get("special") is not True:
        yield Finding.error(
            MASK,
            f"mask_token_id is {token.get('content')!r}, an added token that is not special: "
            "it appears in text; use the profile's id",
            expected=expected,
            actual=mask,
        )
    elif token is None and added and mask < max(added):
        yield Finding.error(
            MASK,
            "mask_token_id is an ordinary text token of the target's tokenizer, not a special "
            "token: the drafter confuses it with text; use the profile's id",
            expected=expected,
            actual=mask,
        )


def _added_tokens(tokenizer: dict) -> dict[int, dict]:
    decoder = tokenizer.get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return {}
    return {
        int(key): value
        for key, value in decoder.items()
        if key.isdigit() and isinstance(value, dict)
    }


def _reserved_token_ids(target: dict, tokenizer: dict | None) -> dict[int, str]:
    """Ids of the target's bos/eos/pad tokens (config and tokenizer), with their role."""
    reserved: dict[int, str] = {}
    for config in (target, text_config(target)):
        for role in ("bos", "eos", "pad"):
            value = config.get(f"{role}_token_id")
            for token_id in value if isinstance(value, list) else [value]:
                if is_int(token_id):
                    reserved[token_id] = role
    if tokenizer is not None:
        added = _added_tokens(tokenizer)
        ids = {token.get("content"): token_id for token_id, token in added.items()}
        for role in ("bos", "eos", "pad"):
            value = tokenizer.get(f"{role}_token")
            content = value.get("content") if isinstance(value, dict) else value
            if content in ids:
                reserved[ids[content]] = role
    return reserved


MASK_EMBEDDING_FILE = "mask_embedding.pt"


def mask_embedding_findings(c: DrafterInputs) -> Iterator[Finding]:
    if c.drafter_files is None or MASK_EMBEDDING_FILE not in c.drafter_files:
        return
    yield Finding.warning(
        MASK_EMBEDDING_FILE,
        f"the drafter dir ships {MASK_EMBEDDING_FILE}: vLLM replaces the embedding of the mask "
        "token with it, and refuses to start when the file names another mask_token_id than "
        "the config; make sure it belongs to this drafter",
        actual=MASK_EMBEDDING_FILE,
    )
