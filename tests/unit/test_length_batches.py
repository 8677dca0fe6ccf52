"""Document embedding in passes of similar length: short sentences are not padded to their chunk's length,
and every text still gets the vector it gets alone."""

import numpy as np
import pytest

from shared import components
from shared.config import KBConfig
from shared.embedders import length_batches

pytestmark = pytest.mark.unit


def test_every_text_is_in_one_pass_longest_first_within_the_spread():
    lengths = [240, 31, 236, 12, 55, 250, 28, 120, 0, 61]
    batches = length_batches(lengths, 3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    order = [lengths[i] for batch in batches for i in batch]
    assert order == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) <= 3
        assert lengths[batch[0]] <= 2 * max(lengths[batch[-1]], 1)
    # the three chunks share a pass; no sentence joins it
    assert [lengths[i] for i in batches[0]] == [250, 240, 236]


def test_a_chunk_with_its_sentences_embeds_as_each_text_alone():
    embedder = components.embedder_for(KBConfig(name="kb"))
    sentences = ["The AMR-7 battery takes 90 minutes to charge fully.", "Charging starts when the robot docks.",
                 "The dock light turns green when charging ends."]
    chunk = "Battery\n" + " ".join(sentences) * 6
    texts = [chunk, *sentences, "电池充满电需要九十分钟。"]
    together = embedder.embed_documents(texts)
    alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
    assert together.shape == (len(texts), embedder.dimension) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, atol=1e-5)
