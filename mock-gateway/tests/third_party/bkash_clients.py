#!/usr/bin/env python3
"""Drives third-party bKash Tokenized Checkout client libraries from PyPI,
unchanged, against a running mock gateway: only their base URL is changed.

Clients (pinned in scripts/requirements-test.txt):
  - bkash-pgw-tokenized 1.0.0 (async ``Bkash(config)``, config ``base_url``)
  - pybkash 0.4.2 (sync ``Token`` + ``Client``, ``token.base_url``)

For each client: grant (and refresh) -> create -> pay on the checkout page ->
execute -> execute again (refused, 2117) -> status -> search -> partial refund
-> refund of more than the rest (refused) -> refund of the rest -> refund once
more (refused). Every answer is asserted on; one line is printed per step.

The last line printed is ``RESULT <json>``: the payments made, their trxIDs and
refunds, for the caller to compare with the gateway's ledger.

Usage:
  bkash_clients.py <base-url> [--username U --password P --app-key K --app-secret S]
Credentials default to $BKASH_USERNAME, $BKASH_PASSWORD, $BKASH_APP_KEY,
$BKASH_APP_SECRET, then to the mock's default merchant. Exits 1 on the first
mismatch, with a message saying what was expected and what came back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

# The mock serves the API both at the root and under the version prefix real
# base URLs carry, so a client configured with a real URL works by swapping
# only scheme and host.
VERSION_PREFIX = "/v1.2.0-beta"
SUCCESS = "0000"
EXECUTION_ALREADY_COMPLETED = "2117"
REFUND_EXCEEDS_AMOUNT = "2026"
ALREADY_REFUNDED = "2034"
CALLBACK_URL = "https://merchant.example/bkash/callback?shop=sellout"


class Mismatch(Exception):
    """An answer was not what a bKash client should get."""


def step(client: str, what: str, detail: str = "") -> None:
    print(f"[{client}] ok  {what}{': ' + detail if detail else ''}", flush=True)


def check(cond: bool, what: str, got: Any = None) -> None:
    if not cond:
        raise Mismatch(f"{what}; got {got!r}" if got is not None else what)


def check_eq(what: str, got: Any, want: Any) -> None:
    if got != want:
        raise Mismatch(f"{what}: expected {want!r}, got {got!r}")


def check_success(what: str, answer: dict[str, Any]) -> None:
    check(isinstance(answer, dict), f"{what}: answer is not a JSON object", answer)
    if answer.get("statusCode") != SUCCESS:
        raise Mismatch(
            f"{what}: expected statusCode {SUCCESS!r}, got "
            f"{answer.get('statusCode')!r} ({answer.get('statusMessage')!r}); answer {answer!r}"
        )


def money(value: Any) -> Decimal:
    """An amount as bKash sends it (a decimal string), for comparisons."""
    check(isinstance(value, str), "amounts must be JSON strings", value)
    return Decimal(value)


def pay(http: httpx.Client, client: str, bkash_url: str, payment_id: str,
        success_callback: str | None) -> None:
    """Acts as the payer: POSTs ``action=pay`` to the checkout page and checks
    the 302 back to the merchant's callback, without following it."""
    r = http.post(bkash_url, data={"action": "pay", "wallet": "01770618575"})
    check_eq("checkout POST action=pay: HTTP status", r.status_code, 302)
    location = r.headers.get("location", "")
    got, want = urlsplit(location), urlsplit(CALLBACK_URL)
    check_eq("redirect target (scheme, host, path)",
             (got.scheme, got.netloc, got.path), (want.scheme, want.netloc, want.path))
    q = parse_qs(got.query)
    check_eq("redirect keeps the merchant's query (shop)", q.get("shop"), ["sellout"])
    check_eq("redirect paymentID", q.get("paymentID"), [payment_id])
    check_eq("redirect status", q.get("status"), ["success"])
    signature = q.get("signature", [""])
    check(len(signature) == 1 and signature[0] != "", "redirect carries a signature", location)
    if success_callback is not None:
        check_eq("redirect equals the successCallbackURL create announced",
                 location, success_callback)
    step(client, "pay", f"302 -> {location}")


# --------------------------------------------------------------------------- #
# bkash-pgw-tokenized (async)
# --------------------------------------------------------------------------- #

async def run_pgw(base: str, creds: dict[str, str],
                  http: httpx.Client) -> tuple[dict[str, Any], str]:
    """Returns the payment made and the session's refresh token."""
    from bkash_pgw_tokenized import (
        Bkash,
        MemoryTokenStore,
        TokenState,
        ensure_id_token,
        is_success_status_code,
    )

    name = "bkash-pgw-tokenized"
    bk = Bkash({**creds, "sandbox": True, "base_url": base + VERSION_PREFIX})

    grant = await bk.grant_token()
    check_success("grant_token", grant)
    check(bool(grant.get("id_token")), "grant: id_token present", grant)
    check(bool(grant.get("refresh_token")), "grant: refresh_token present", grant)
    check_eq("grant: token_type", grant.get("token_type"), "Bearer")
    check(isinstance(grant.get("expires_in"), int) and grant["expires_in"] > 0,
          "grant: expires_in is a positive integer", grant.get("expires_in"))
    step(name, "grant_token", f"expires_in={grant['expires_in']}")

    refreshed = await bk.refresh_token(grant["refresh_token"])
    check_success("refresh_token", refreshed)
    check(bool(refreshed.get("id_token")), "refresh: id_token present", refreshed)
    check(refreshed["id_token"] != grant["id_token"], "refresh: a new id_token",
          refreshed["id_token"])
    step(name, "refresh_token", "new id_token issued")

    # The library's own token helper: an expired id_token with a refresh token
    # must be renewed by refresh, not by a new grant.
    store = MemoryTokenStore()
    await store.save(TokenState(
        id_token=grant["id_token"],
        refresh_token=grant["refresh_token"],
        id_token_expires_at=datetime.now(UTC) - timedelta(minutes=5),
    ))
    token = await ensure_id_token(store, bk)
    check(token not in (grant["id_token"], refreshed["id_token"]),
          "ensure_id_token: a fresh id_token from refresh", token)
    state = await store.load()
    check_eq("ensure_id_token: refresh token kept", state.refresh_token, grant["refresh_token"])
    check(state.id_token_expires_at > datetime.now(UTC) + timedelta(minutes=30),
          "ensure_id_token: expiry from expires_in", state.id_token_expires_at)
    again = await ensure_id_token(store, bk)
    check_eq("ensure_id_token: cached token reused", again, token)
    step(name, "ensure_id_token", "expired id_token renewed via refresh, then cached")

    invoice = "SELLOUT-PGW-0001"
    created = await bk.create_payment(
        token,
        mode="0011",
        payer_reference="01770618575",
        callback_url=CALLBACK_URL,
        amount="500",
        currency="BDT",
        intent="sale",
        merchant_invoice_number=invoice,
    )
    check_success("create_payment", created)
    check(is_success_status_code(created["statusCode"]),
          "create: the library calls the statusCode a success", created["statusCode"])
    payment_id = created.get("paymentID")
    check(isinstance(payment_id, str) and payment_id != "", "create: paymentID", created)
    check_eq("create: transactionStatus", created.get("transactionStatus"), "Initiated")
    check_eq("create: amount", money(created.get("amount")), Decimal("500"))
    check_eq("create: currency", created.get("currency"), "BDT")
    check_eq("create: intent", created.get("intent"), "sale")
    check_eq("create: merchantInvoiceNumber", created.get("merchantInvoiceNumber"), invoice)
    check_eq("create: callbackURL", created.get("callbackURL"), CALLBACK_URL)
    for key in ("bkashURL", "successCallbackURL", "failureCallbackURL",
                "cancelledCallbackURL", "paymentCreateTime"):
        check(isinstance(created.get(key), str) and created[key] != "",
              f"create: {key} present", created)
    step(name, "create_payment", f"paymentID={payment_id} amount={created['amount']}")

    before = await bk.payment_status(token, payment_id)
    check_success("payment_status before pay", before)
    check_eq("status before pay: transactionStatus", before.get("transactionStatus"), "Initiated")
    check(not before.get("trxID"), "status before pay: no trxID yet", before.get("trxID"))
    step(name, "payment_status (before pay)", "Initiated")

    pay(http, name, created["bkashURL"], payment_id, created["successCallbackURL"])

    executed = await bk.execute_payment(token, payment_id)
    check_success("execute_payment", executed)
    check_eq("execute: paymentID", executed.get("paymentID"), payment_id)
    check_eq("execute: transactionStatus", executed.get("transactionStatus"), "Completed")
    trx_id = executed.get("trxID")
    check(isinstance(trx_id, str) and trx_id != "", "execute: trxID", executed)
    check_eq("execute: amount", money(executed.get("amount")), Decimal("500"))
    check_eq("execute: merchantInvoiceNumber", executed.get("merchantInvoiceNumber"), invoice)
    check(bool(executed.get("customerMsisdn")), "execute: customerMsisdn", executed)
    check(bool(executed.get("paymentExecuteTime")), "execute: paymentExecuteTime", executed)
    step(name, "execute_payment", f"Completed trxID={trx_id}")

    twice = await bk.execute_payment(token, payment_id)
    check_eq("second execute: statusCode", twice.get("statusCode"), EXECUTION_ALREADY_COMPLETED)
    check(not twice.get("trxID"), "second execute: no trxID", twice)
    step(name, "execute_payment again", f"refused {twice['statusCode']} {twice.get('statusMessage')!r}")

    status = await bk.payment_status(token, payment_id)
    check_success("payment_status", status)
    check_eq("status: transactionStatus", status.get("transactionStatus"), "Completed")
    check_eq("status: trxID equals execute's", status.get("trxID"), trx_id)
    check_eq("status: verificationStatus", status.get("verificationStatus"), "Complete")
    check_eq("status: amount", money(status.get("amount")), Decimal("500"))
    step(name, "payment_status", f"Completed trxID={status['trxID']}")

    found = await bk.search_transaction(token, trx_id=trx_id)
    check_success("search_transaction", found)
    check_eq("search: trxID", found.get("trxID"), trx_id)
    check_eq("search: transactionStatus", found.get("transactionStatus"), "Completed")
    check_eq("search: amount", money(found.get("amount")), Decimal("500"))
    check_eq("search: maxRefundableAmount", money(found.get("maxRefundableAmount")), Decimal("500"))
    step(name, "search_transaction", f"trxID={found['trxID']} maxRefundable={found['maxRefundableAmount']}")

    refunds = []
    first = await bk.refund(token, payment_id=payment_id, trx_id=trx_id, amount="200",
                            sku="SKU-1", reason="partial refund")
    check_success("refund 200", first)
    check_eq("refund: originalTrxID", first.get("originalTrxID"), trx_id)
    check_eq("refund: transactionStatus", first.get("transactionStatus"), "Completed")
    check_eq("refund: amount", money(first.get("amount")), Decimal("200"))
    check(bool(first.get("refundTrxID")) and first["refundTrxID"] != trx_id,
          "refund: its own refundTrxID", first.get("refundTrxID"))
    refunds.append({"refundTrxID": first["refundTrxID"], "amount": first["amount"]})
    step(name, "refund 200 of 500", f"refundTrxID={first['refundTrxID']}")

    too_much = await bk.refund(token, payment_id=payment_id, trx_id=trx_id, amount="300.01",
                               sku="SKU-1", reason="more than the rest")
    check(too_much.get("statusCode") not in (None, SUCCESS),
          "refund of more than the rest must be refused", too_much)
    check_eq("refund of more than the rest: statusCode", too_much.get("statusCode"),
             REFUND_EXCEEDS_AMOUNT)
    step(name, "refund 300.01 of the 300 left", f"refused {too_much['statusCode']}")

    rest = await bk.refund(token, payment_id=payment_id, trx_id=trx_id, amount="300",
                           sku="SKU-1", reason="the rest")
    check_success("refund 300", rest)
    check_eq("refund rest: amount", money(rest.get("amount")), Decimal("300"))
    check(rest.get("refundTrxID") != first["refundTrxID"], "refund rest: a new refundTrxID", rest)
    refunds.append({"refundTrxID": rest["refundTrxID"], "amount": rest["amount"]})
    step(name, "refund the 300 left", f"refundTrxID={rest['refundTrxID']}")

    after = await bk.search_transaction(token, trx_id=trx_id)
    check_success("search after refunds", after)
    check_eq("search after refunds: maxRefundableAmount",
             money(after.get("maxRefundableAmount")), Decimal("0"))
    step(name, "search_transaction after refunds", "maxRefundable=0")

    more = await bk.refund(token, payment_id=payment_id, trx_id=trx_id, amount="1",
                           sku="SKU-1", reason="after full refund")
    check(more.get("statusCode") not in (None, SUCCESS),
          "refund after a full refund must be refused", more)
    step(name, "refund after full refund", f"refused {more['statusCode']}")

    return ({"client": name, "paymentID": payment_id, "trxID": trx_id,
             "amount": "500", "refunds": refunds}, grant["refresh_token"])


# --------------------------------------------------------------------------- #
# pybkash (sync)
# --------------------------------------------------------------------------- #

def run_pybkash(base: str, creds: dict[str, str], http: httpx.Client,
                status_of: Any) -> dict[str, Any]:
    from pybkash import APIError, Client, Token

    name = "pybkash"
    token = Token(creds["username"], creds["password"], creds["app_key"],
                  creds["app_secret"], sandbox=True)
    token.base_url = base + VERSION_PREFIX  # pybkash's base-URL setting; before Client()
    client = Client(token)
    try:
        id_token = token.get_token_id(http)  # what Client does before its first call
        check(bool(id_token), "grant: id_token", id_token)
        check(isinstance(token.token_obj.get("expires_in"), int),
              "grant: expires_in is an integer", token.token_obj)
        step(name, "grant (Token.get_token_id)", f"expires_in-100={token.token_obj['expires_in']}")

        invoice = "SELLOUT-PYB-0001"
        # pybkash sends the amount as a JSON number
        created = client.create_payment(CALLBACK_URL, "01770618575", 1250.75,
                                        invoice_number=invoice)
        check_eq("create: status_code", created.status_code, SUCCESS)
        payment_id = created.payment_id
        check(bool(payment_id), "create: paymentID", payment_id)
        check_eq("create: callback_url", created.callback_url, CALLBACK_URL)
        step(name, "create_payment", f"paymentID={payment_id} amount=1250.75 (JSON number)")

        queried = client.query_payment(payment_id)
        check_eq("query before pay: transaction_status", queried.transaction_status, "Initiated")
        check_eq("query before pay: amount", money(queried.amount), Decimal("1250.75"))
        check_eq("query before pay: merchant_invoice", queried.merchant_invoice, invoice)
        step(name, "query_payment (before pay)", "Initiated")

        pay(http, name, created.bkash_url, payment_id, created.success_callback)

        executed = client.execute_payment(payment_id)
        check_eq("execute: status_code", executed.status_code, SUCCESS)
        check(executed.is_complete(), "execute: is_complete()", executed.status)
        check_eq("execute: payment_id", executed.payment_id, payment_id)
        trx_id = executed.trx_id
        check(bool(trx_id), "execute: trxID", trx_id)
        check_eq("execute: amount", money(executed.amount), Decimal("1250.75"))
        check_eq("execute: merchant_invoice_number", executed.merchant_invoice_number, invoice)
        step(name, "execute_payment", f"Completed trxID={trx_id}")

        try:
            client.execute_payment(payment_id)
        except APIError as e:
            check_eq("second execute: APIError status_code", e.status_code,
                     EXECUTION_ALREADY_COMPLETED)
            step(name, "execute_payment again", f"APIError {e}")
        else:
            raise Mismatch("second execute: expected APIError 2117, got success")

        queried = client.query_payment(payment_id)
        check_eq("query: status_code", queried.status_code, SUCCESS)
        check(queried.is_complete(), "query: is_complete()", queried.status)
        check_eq("query: verification_status", queried.verification_status, "Complete")
        # pybkash's Payment model drops trxID; read it from the same status call
        # through the other client to check consistency.
        check_eq("status trxID (pybkash payment) equals execute's", status_of(payment_id), trx_id)
        step(name, "query_payment", "Completed")

        found = client.search_trx(trx_id)
        check_eq("search: status_code", found.status_code, SUCCESS)
        check_eq("search: trx_id", found.trx_id, trx_id)
        check(found.is_complete(), "search: is_complete()", found.status)
        check_eq("search: amount", money(found.amount), Decimal("1250.75"))
        check_eq("search: max_refundable_amount", money(found.max_refundable_amount),
                 Decimal("1250.75"))
        step(name, "search_trx", f"trxID={found.trx_id} maxRefundable={found.max_refundable_amount}")

        refunds = []
        first = client.execute_refund(payment_id, trx_id, 250.75, "SKU-2", "partial refund")
        check_eq("refund: status_code", first.status_code, SUCCESS)
        check(first.is_complete(), "refund: is_complete()", first.status)
        check_eq("refund: original_trx_id", first.original_trx_id, trx_id)
        check_eq("refund: amount", money(first.amount), Decimal("250.75"))
        check(bool(first.refund_trx_id) and first.refund_trx_id != trx_id,
              "refund: its own refundTrxID", first.refund_trx_id)
        refunds.append({"refundTrxID": first.refund_trx_id, "amount": first.amount})
        step(name, "execute_refund 250.75 of 1250.75", f"refundTrxID={first.refund_trx_id}")

        try:
            client.execute_refund(payment_id, trx_id, 1000.01, "SKU-2", "more than the rest")
        except APIError as e:
            check_eq("refund of more than the rest: APIError status_code", e.status_code,
                     REFUND_EXCEEDS_AMOUNT)
            step(name, "execute_refund 1000.01 of the 1000 left", f"APIError {e}")
        else:
            raise Mismatch("refund of more than the rest: expected APIError, got success")

        rest = client.execute_refund(payment_id, trx_id, 1000, "SKU-2", "the rest")
        check_eq("refund rest: status_code", rest.status_code, SUCCESS)
        check_eq("refund rest: amount", money(rest.amount), Decimal("1000"))
        check(rest.refund_trx_id != first.refund_trx_id, "refund rest: a new refundTrxID",
              rest.refund_trx_id)
        refunds.append({"refundTrxID": rest.refund_trx_id, "amount": rest.amount})
        step(name, "execute_refund the 1000 left", f"refundTrxID={rest.refund_trx_id}")

        after = client.search_trx(trx_id)
        check_eq("search after refunds: max_refundable_amount",
                 money(after.max_refundable_amount), Decimal("0"))
        step(name, "search_trx after refunds", "maxRefundable=0")

        try:
            client.execute_refund(payment_id, trx_id, 1, "SKU-2", "after full refund")
        except APIError as e:
            check(e.status_code != SUCCESS, "refund after full refund refused", e.status_code)
            step(name, "execute_refund after full refund", f"APIError {e}")
        else:
            raise Mismatch("refund after a full refund: expected APIError, got success")

        return {"client": name, "paymentID": payment_id, "trxID": trx_id,
                "amount": "1250.75", "refunds": refunds}
    finally:
        client.close()


# --------------------------------------------------------------------------- #

def exempt_from_proxies(base: str) -> None:
    """httpx honours HTTP(S)_PROXY; the mock is local, so never proxy it."""
    host = urlsplit(base).hostname or ""
    for var in ("NO_PROXY", "no_proxy"):
        have = [h for h in os.environ.get(var, "").split(",") if h.strip()]
        if host not in have:
            os.environ[var] = ",".join(have + [host])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_url", help="the mock gateway, e.g. http://127.0.0.1:9090")
    ap.add_argument("--username", default=os.environ.get("BKASH_USERNAME", "sellout"))
    ap.add_argument("--password", default=os.environ.get("BKASH_PASSWORD", "sellout-password"))
    ap.add_argument("--app-key", default=os.environ.get("BKASH_APP_KEY", "sellout-app-key"))
    ap.add_argument("--app-secret",
                    default=os.environ.get("BKASH_APP_SECRET", "sellout-app-secret"))
    args = ap.parse_args()
    base = args.base_url.rstrip("/")
    creds = {"username": args.username, "password": args.password,
             "app_key": args.app_key, "app_secret": args.app_secret}
    exempt_from_proxies(base)

    stage = "setup"
    try:
        with httpx.Client(follow_redirects=False, timeout=30) as http:
            stage = "bkash-pgw-tokenized"
            pgw, pgw_refresh = asyncio.run(run_pgw(base, creds, http))

            # pybkash's Payment model drops trxID: read the status of its payment
            # through bkash-pgw-tokenized too, with a refreshed token (no grant).
            from bkash_pgw_tokenized import Bkash
            bk = Bkash({**creds, "base_url": base + VERSION_PREFIX})

            async def trx_of(payment_id: str) -> Any:
                token = await bk.refresh_token(pgw_refresh)
                check_success("refresh_token (cross-check)", token)
                answer = await bk.payment_status(token["id_token"], payment_id)
                check_success("payment_status (cross-check)", answer)
                return answer.get("trxID")

            stage = "pybkash"
            pyb = run_pybkash(base, creds, http, lambda pid: asyncio.run(trx_of(pid)))
    except Mismatch as e:
        print(f"FAIL [{stage}] {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # a client raising is an incompatibility too
        traceback.print_exc()
        print(f"FAIL [{stage}] {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1

    print("all steps passed with both clients", flush=True)
    print("RESULT " + json.dumps({"payments": [pgw, pyb]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
