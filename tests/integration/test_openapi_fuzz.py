"""Property-based fuzzing of the gateway's OpenAPI spec (schemathesis): no input may cause a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error


pytestmark = pytest.mark.integration

EXAMPLES_PER_OPERATION = 12


@pytest.fixture(scope="module")
def api_schema(stack, client):
    client.create_kb("fuzz")
    client.wait([client.upload("fuzz", "a.md", "# A\n\nThe dock charges in 45 minutes. 充电需要45分钟。".encode())["job_id"]])
    # POST /v1/admin/keys is fuzzed too: with no key yet, the API mints none (403), so auth stays as it is
    return schemathesis.openapi.from_url(f"{stack.http_url}/openapi.json")


def test_no_input_makes_the_gateway_fail(api_schema):
    """A bounded number of generated requests per operation; each must get a non-5xx answer."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10
    statuses: dict[str, set[int]] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        def fuzz(case):
            response = case.call_and_validate(checks=[not_a_server_error])
            assert response.status_code < 500, (operation.label, response.text[:300])
            statuses.setdefault(operation.label, set()).add(response.status_code)

        fuzz()
    assert set(statuses) == {operation.label for operation in operations}  # every operation was exercised
    assert any(code < 300 for codes in statuses.values() for code in codes)  # and not only rejected


def test_the_spec_names_the_runtime_routes(api_schema):
    paths = set(api_schema.raw_schema["paths"])
    assert {"/v1/traces/{trace_id}", "/v1/traces/{trace_id}/replay", "/v1/admin/steps", "/v1/admin/keys"} <= paths


@given(query=st.text(min_size=0, max_size=300), top_k=st.integers(min_value=-5, max_value=300),
       namespaces=st.lists(st.text(max_size=20), max_size=3))
@settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_arbitrary_queries_against_a_real_knowledge_base_get_an_answer_or_a_4xx(api_schema, client, query, top_k,
                                                                                namespaces):
    """Any Unicode text (control characters, CJK, emoji), any top_k and namespaces, through the whole pipeline."""
    response = client._http.post("/v1/knowledge-bases/fuzz/query",
                                 json={"query": query, "top_k": top_k, "namespaces": namespaces})
    assert response.status_code < 500, response.text[:300]
    if response.status_code == 200:
        assert response.json()["trace_id"]
    else:
        assert response.json()["error"]["message"]
