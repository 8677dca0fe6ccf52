"""Physical names of KB versions: version 1 keeps the names KBs had before versions, and no KB's name can
produce another KB's version or alias."""

import pytest

from shared.stores import elasticsearch, milvus

pytestmark = pytest.mark.unit

KBS = ["docs", "Docs", "docs_v2", "v2_docs", "2_docs", "docs-live", "live", "kb", "x"]


def test_version_1_keeps_the_names_kbs_had_before_versions():
    assert elasticsearch.index_name("ragkb", "docs") == "ragkb-kb-docs"
    assert elasticsearch.index_name("ragkb", "Docs").startswith("ragkb-kb-docs-")
    assert milvus.collection_name("docs", "all_minilm_l6_v2", 384) == "kb_docs__all_minilm_l6_v2_384"
    assert elasticsearch.index_name("ragkb", "docs", 3) == "ragkb-kb-docs.v3"
    assert milvus.collection_name("docs", "m", 32, 3) == "kbv3_docs__m_32"


def test_no_two_kbs_versions_or_aliases_share_a_name():
    es_names = [elasticsearch.index_name("ragkb", kb, v) for kb in KBS for v in (1, 2, 12, 21)]
    es_names += [elasticsearch.alias_name("ragkb", kb) for kb in KBS]
    milvus_names = [milvus.collection_name(kb, "m", 32, v) for kb in KBS for v in (1, 2, 12, 21)]
    milvus_names += [milvus.alias_name(kb) for kb in KBS]
    assert len(set(es_names)) == len(es_names)
    assert len(set(milvus_names)) == len(milvus_names)
