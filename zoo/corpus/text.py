"""Transformer builders from Hugging Face ``transformers`` configs (no hub access).

Every model is built from a small config object (2 layers, hidden size 32-64, small
vocabularies) with seeded random weights, wrapped in a module taking positional tensors
and returning a tuple of tensors, which both exporters accept.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["TRANSFORMERS", "transformer"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}


def _tokens(vocab: int, batch: int = 1, length: int = 16) -> Any:
    import torch

    return torch.randint(0, vocab, (batch, length))


def _wrap(forward: Any) -> Any:
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return forward(self.inner, *args)

    return Wrapped


def bert() -> tuple[Any, tuple]:
    import torch
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=100, max_position_embeddings=64, **_SMALL), add_pooling_layer=True)
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0
    wrapped = _wrap(lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).to_tuple())(model)
    return wrapped, (_tokens(100), mask)


def distilbert() -> tuple[Any, tuple]:
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(vocab_size=100, max_position_embeddings=64, dim=64, n_layers=2, n_heads=4,
                              hidden_dim=128)
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 10:] = 0
    wrapped = _wrap(lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).last_hidden_state)
    return wrapped(DistilBertModel(config)), (_tokens(100), mask)


def gpt2() -> tuple[Any, tuple]:
    """GPT-2 decoding one token with a cache of 8 past tokens (``use_cache``): past keys and
    values in, logits and the grown cache out."""
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=100, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config)

    def forward(m: Any, ids: Any, k0: Any, v0: Any, k1: Any, v1: Any) -> Any:
        cache = DynamicCache(config=config)
        cache.update(k0, v0, 0)
        cache.update(k1, v1, 1)
        out = m(input_ids=ids, past_key_values=cache, use_cache=True)
        layers = out.past_key_values.layers
        return (out.logits, layers[0].keys, layers[0].values, layers[1].keys, layers[1].values)

    past = [torch.randn(1, 4, 8, 16) for _ in range(4)]
    return _wrap(forward)(model), (_tokens(100, length=1), *past)


def t5() -> tuple[Any, tuple]:
    from transformers import T5Config, T5Model

    config = T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                      num_heads=4)
    wrapped = _wrap(lambda m, ids, dec: m(input_ids=ids, decoder_input_ids=dec, use_cache=False).last_hidden_state)
    return wrapped(T5Model(config)), (_tokens(100), _tokens(100, length=4))


def vit() -> tuple[Any, tuple]:
    import torch
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, **_SMALL)
    wrapped = _wrap(lambda m, x: m(pixel_values=x).last_hidden_state)
    return wrapped(ViTModel(config, add_pooling_layer=False)), (torch.rand(1, 3, 32, 32),)


def whisper_encoder() -> tuple[Any, tuple]:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(vocab_size=100, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                           max_source_positions=32)
    wrapped = _wrap(lambda m, x: m(input_features=x).last_hidden_state)
    return wrapped(WhisperEncoder(config)), (torch.randn(1, 16, 64),)


def wav2vec2() -> tuple[Any, tuple]:
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=False)
    wrapped = _wrap(lambda m, x: m(input_values=x).last_hidden_state)
    return wrapped(Wav2Vec2Model(config)), (torch.randn(1, 800),)


def llama() -> tuple[Any, tuple]:
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(vocab_size=100, max_position_embeddings=64, num_key_value_heads=2, **_SMALL)
    wrapped = _wrap(lambda m, ids: m(input_ids=ids, use_cache=False).last_hidden_state)
    return wrapped(LlamaModel(config)), (_tokens(100),)


def roberta() -> tuple[Any, tuple]:
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(vocab_size=100, max_position_embeddings=64, **_SMALL)
    wrapped = _wrap(lambda m, ids: m(input_ids=ids).last_hidden_state)
    return wrapped(RobertaModel(config, add_pooling_layer=False)), (_tokens(100),)


TRANSFORMERS = {"hf_bert": bert, "hf_distilbert": distilbert, "hf_gpt2_past": gpt2, "hf_t5": t5, "hf_vit": vit,
                "hf_whisper_encoder": whisper_encoder, "hf_wav2vec2": wav2vec2, "hf_llama": llama,
                "hf_roberta": roberta}


def transformer(name: str) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    module, args = TRANSFORMERS[name]()
    return module.eval(), args
