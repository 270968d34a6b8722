"""Python builder classes for the sequence layers (dptrain.layers: Embedding, LayerNorm,
RMSNorm, SeqLinear, Attention, MultiheadSelfAttention, TransformerMLP, TransformerBlock,
MeanPool, ClsPool, ToSequence, PatchEmbedding): a model built from them is the model of the
spec string, layer for layer. For the named transformers: the builder's spec equals the
name's expansion, the parameter count and tensor names are the same, and on the same
weights the outputs are bit for bit the same."""
import numpy as np
import pytest

import dptrain
from dptrain.layers import (Attention, ClsPool, Conv2d, Embedding, GELU, LayerNorm, Linear, MeanPool,
                            MultiheadSelfAttention, PatchEmbedding, Residual, RMSNorm, SeqLinear, ToSequence,
                            TransformerBlock, TransformerMLP, build_spec)
from dptrain.errors import DptrainError

BLK = "[ln,plin192,attn4%s,plin64],[ln,plin256,gelu,plin64]"


def same_model(layers, input_shape, name, x):
    """Model(layers) vs Model(name): same spec (expansion), parameters, names, outputs."""
    spec = build_spec(layers, input_shape)
    a = dptrain.Model.from_spec(spec, threads=1)
    b = dptrain.Model.from_spec(name, threads=1)
    assert a.n_params == b.n_params
    assert list(a.parameters()) == list(b.parameters())
    rng = np.random.default_rng(5)
    w = {k: rng.normal(0, 0.2, v.shape).astype(np.float32) for k, v in b.parameters().items()}
    a.set_parameters(w)
    b.set_parameters(w)
    assert np.array_equal(a.predict(x), b.predict(x))
    return spec


def test_gpt_tiny_from_layers():
    layers = [Embedding(40, 64), TransformerBlock(64, 4, 256, causal=True), TransformerBlock(64, 4, 256, causal=True),
              LayerNorm(), SeqLinear(40)]
    x = np.random.default_rng(1).integers(0, 40, (3, 16)).astype(np.float32)
    spec = same_model(layers, 16, "gpt_tiny:t16:v40", x)
    assert spec == "seq:16:emb40x64," + BLK % "c" + "," + BLK % "c" + ",ln,plin40"


def test_bert_tiny_with_padding_from_layers():
    layers = [Embedding(30, 64, pad_id=0), TransformerBlock(64, 4), TransformerBlock(64, 4), LayerNorm(), MeanPool(),
              Linear(5)]
    x = np.random.default_rng(2).integers(1, 30, (3, 8)).astype(np.float32)
    x[1, 5:] = 0  # padded
    spec = same_model(layers, (1, 8, 1), "bert_tiny:t8:v30:c5:p0", x)
    assert spec == "seq:8:emb30x64pad0," + BLK % "" + "," + BLK % "" + ",ln,meanpool,fc5"


def test_vit_mnist_from_layers():
    layers = [PatchEmbedding(64, 4), TransformerBlock(64, 4, 256), TransformerBlock(64, 4, 256), LayerNorm(),
              ClsPool(), Linear(10)]
    x = np.random.default_rng(3).normal(size=(2, 784)).astype(np.float32)
    spec = same_model(layers, (1, 28, 28), "vit_mnist", x)
    assert spec.startswith("cnn:1x28x28:conv64k4s4,toseqcls,")


def test_pieces_match_their_items():
    """Each class is its spec item; the composites are their layers in order."""
    layers = [Embedding(9, 6, positions=False), RMSNorm(), Residual([LayerNorm(), SeqLinear(18, bias=False),
                                                                      Attention(3, causal=True), SeqLinear(6)]),
              Residual([LayerNorm(), TransformerMLP(6, 10)]), MultiheadSelfAttention(6, 2, bias=False), MeanPool()]
    assert build_spec(layers, 5) == ("seq:5:emb9x6nopos,rms,[ln,plin18nobias,attn3c,plin6],[ln,plin10,gelu,plin6],"
                                     "plin18nobias,attn2,plin6nobias,meanpool")
    img = [Conv2d(8, 2, stride=2), ToSequence(positions=False), LayerNorm(), ClsPool(), GELU()]
    assert build_spec(img, (3, 4, 4)) == "cnn:3x4x4:conv8k2s2,toseqnopos,ln,clspool,gelu"
    assert repr(Embedding(5, 4, pad_id=1)) == "Embedding(num_embeddings=5, embedding_dim=4, positions=True, pad_id=1)"


def test_errors():
    with pytest.raises(DptrainError, match="pad id 7 is not a token of the vocabulary"):
        dptrain.Model.from_spec(build_spec([Embedding(5, 4, pad_id=7), MeanPool()], 6))
    with pytest.raises(DptrainError, match="nested|group"):  # a block opens its own residual groups
        build_spec([Embedding(5, 4), Residual([TransformerBlock(4, 2)])], 6)
    with pytest.raises(DptrainError, match="queries, keys and values"):
        build_spec([Embedding(5, 4), Attention(2)], 6)
    with pytest.raises(ValueError, match="Embedding.pad_id must be >= 0"):
        Embedding(5, 4, pad_id=-1)
    with pytest.raises(TypeError, match="TransformerBlock.heads must be an integer"):
        TransformerBlock(8, 2.5)
