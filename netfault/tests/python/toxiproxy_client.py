"""Drives netfault's HTTP API with toxiproxy's Python client from PyPI
(toxiproxy-python), unchanged but for the API's host and port.

    toxiproxy_client.py create API_PORT UPSTREAM
        creates proxy "redis" to UPSTREAM with a 300 ms latency toxic;
        prints {"listen", "version", "duplicate_refused"}
    toxiproxy_client.py list_and_delete API_PORT
        lists proxies and toxics, checks the client's error mapping, deletes
        the toxic and the proxy; prints what it saw

Run by netfault/tests/python_client.rs, which asserts on what the proxy does.
"""

import json
import sys

from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists


def create(server, upstream):
    proxy = server.create(upstream=upstream, name="redis", listen="127.0.0.1:0")
    proxy.add_toxic(type="latency", attributes={"latency": 300, "jitter": 0})
    # past the client's own check: the server must answer 409
    try:
        APIConsumer.post("/proxies", json={"name": "redis", "upstream": upstream})
        duplicate_refused = False
    except ProxyExists:
        duplicate_refused = True
    return {
        "listen": proxy.listen,
        "version": json.loads(server.version())["version"],
        "duplicate_refused": duplicate_refused,
    }


def list_and_delete(server):
    proxies = server.proxies()
    proxy = proxies["redis"]
    toxics = proxy.toxics()
    seen = {
        "proxies": sorted(proxies),
        "enabled": proxy.enabled,
        "toxics": {
            name: {
                "type": t.type,
                "stream": t.stream,
                "toxicity": t.toxicity,
                "attributes": t.attributes,
            }
            for name, t in toxics.items()
        },
    }
    try:
        APIConsumer.get("/proxies/nope")
        seen["not_found_raised"] = False
    except NotFound:
        seen["not_found_raised"] = True
    try:
        proxy.add_toxic(type="no_such_toxic")
        seen["invalid_toxic_raised"] = False
    except InvalidToxic:
        seen["invalid_toxic_raised"] = True
    proxy.destroy_toxic("latency_downstream")
    seen["toxics_after_removal"] = sorted(proxy.toxics())
    seen["destroyed"] = server.destroy(proxy)
    seen["proxies_after_delete"] = sorted(server.proxies())
    return seen


def main():
    phase, api_port = sys.argv[1], int(sys.argv[2])
    server = Toxiproxy()
    server.update_api_consumer("127.0.0.1", api_port)
    if not server.running():
        sys.exit("the API is not listening")
    if phase == "create":
        out = create(server, sys.argv[3])
    elif phase == "list_and_delete":
        out = list_and_delete(server)
    else:
        sys.exit("unknown phase " + phase)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
