# ruff: noqa: E501  (the fixture files and commands below are data; wrapping them would change them)
"""Regenerate the toolchain part of the error-scan corpus by running real commands.

Run from the repository root:  .venv/bin/python tests/corpus/toolchains.py [name ...]

Not run by the test suite (CI has none of these toolchains): the committed JSON files are the corpus.
Every case runs with ``bash -c`` in a scratch project under a temporary directory; its combined output
and exit code are saved to ``tests/corpus/<name>.json`` with the labels written here, by hand, before
the scanner was tuned on them. The temporary path is rewritten to ``/home/dev/proj`` (and the home
directory to ``/home/dev``) so no output names the machine that ran it.

Needs: Python 3 with PyYAML, Node 20 with jest, vitest, mocha, typescript and eslint 9 installed by npm
into ``$LOKI_NODE_TOOLS`` (default /tmp/corpus-work: ``npm install jest vitest mocha typescript
eslint@9``), gcc/g++/cmake, cargo with clippy, Go, Ruby with rspec, PHP, Java 17 with Maven and a local
repository holding maven-surefire 3.2.5 and JUnit 5.10 (the cases run ``mvn -o``), Perl, shellcheck,
git, sqlite3, curl and a local PostgreSQL server (psql cases run as the ``postgres`` OS user through
``runuser``; the recorded command omits that prefix).

Labels, per case (see tests/corpus/README.md):

* ``expected_error``: did the command fail (non-zero exit, or a failure the exit status hides)?
* ``expected_class``: the class a careful reader gives it (docs/error-patterns.md), or None when the
  case is not an error.
* ``expected_text_error``: would the same text, returned by a tool without an exit code (an MCP tool, a
  file read), be a failure? None when the text alone says nothing (no output).
* ``primary_refs``: the ``file:line`` locations a fix starts at (the user's file, not the library frame
  under it; for a parse error, the data file named by the command and the line in the message).
  ``a|b`` accepts either. Written as project paths; a reported path matches when one is a suffix of
  the other.
* ``split``: ``heldout`` for about a third of the cases (a hash of the name): the scanner is tuned on
  ``tune`` only, and the test reports both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NODE_TOOLS = Path(os.environ.get("LOKI_NODE_TOOLS", "/tmp/corpus-work"))
NEUTRAL = "/home/dev/proj"
MAX_OUTPUT = 20_000

FILES: dict[str, str] = {
    # ---------------------------------------------------------------- python
    "py/load_config.py": """\
import json
import sys


def load(path):
    with open(path) as fh:
        return json.load(fh)  # LOADCALL


config = load(sys.argv[1])
print(config["service"])
""",
    "config/settings.json": """\
{
  "service": "billing",
  "port": 8080
  "debug": true
}
""",
    "config/good.json": '{"service": "billing", "error": null, "errors": []}\n',
    "py/load_yaml.py": """\
import sys

import yaml

with open(sys.argv[1]) as fh:
    data = yaml.safe_load(fh)
print(data)
""",
    "config/app.yaml": """\
service:
  name: billing
  port: 8080
database:
  host: db
  user: app
  options:
    - retry: 3
   timeout: 10
""",
    "py/report.py": """\
import csv
import sys


def totals(path):
    out = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            out[row["customer_id"]] = out.get(row["customer_id"], 0) + float(row["amount"])  # KEYLINE
    return out


print(totals(sys.argv[1]))
""",
    "data/orders.csv": "id,customer,amount\n1,ada,3.50\n2,bob,4.00\n",
    "py/fetch_status.py": """\
import sys
import urllib.request


def fetch(url):
    with urllib.request.urlopen(url, timeout=5) as resp:  # URLOPEN
        return resp.read()


print(fetch(sys.argv[1]))
""",
    "py/db_report.py": """\
import sqlite3

conn = sqlite3.connect(":memory:")
rows = conn.execute("select name, total from invoices").fetchall()  # SQLLINE
print(rows)
""",
    "py/slow_child.py": """\
import subprocess

subprocess.run(["sleep", "5"], timeout=0.5)  # TIMEOUTLINE
""",
    "py/retry_ok.py": """\
import logging

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
log = logging.getLogger("sync")
for attempt in (1, 2):
    if attempt == 1:
        log.error("upload failed: ConnectionResetError: [Errno 104] Connection reset by peer; retrying in 1s")
    else:
        log.info("upload succeeded on attempt 2")
print("synced 42 records, 0 errors")
""",
    "py/divide.py": """\
def ratio(a, b):
    return a / b  # DIVLINE


print(ratio(3, 0))
""",
    "py/tests/test_prices.py": """\
import pytest


def discount(price, pct):
    return price * pct / 100


def test_discount():
    assert discount(200, 10) == 180  # PYASSERT


def test_no_discount():
    assert discount(50, 0) == 0
""",
    "py/tests/test_reconnect.py": """\
import pytest


class Flaky:
    def __init__(self):
        self.calls = 0

    def send(self):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionResetError("[Errno 104] Connection reset by peer")
        return "ok"


def send_with_retry(client):
    try:
        return client.send()
    except ConnectionResetError as exc:
        print(f"retrying after error: {exc}")
        return client.send()


def test_retries_after_econnreset():
    assert send_with_retry(Flaky()) == "ok"


def test_error_is_raised_without_retry():
    with pytest.raises(ConnectionResetError):
        Flaky().send()
""",
    "py/typed_app.py": """\
def parse_port(raw: str) -> int:
    if raw.isdigit():
        return int(raw)


def main() -> None:
    port: int = parse_port("80") + "1"  # MYPYLINE
    print(port)
""",
    "py/check_env.py": """\
import os
import sys

missing = [name for name in ("DATABASE_URL", "API_TOKEN") if name not in os.environ]
if missing:
    print(f"error: missing environment variables: {', '.join(missing)}", file=sys.stderr)
    sys.exit(2)
""",
    # ---------------------------------------------------------------- node
    "js/package.json": '{"name": "js-app", "version": "1.0.0", "type": "commonjs"}\n',
    "js/src/cart.mjs": """\
export function total(cart) {
  let sum = 0;
  for (const item of cart.items) {
    sum += item.price * item.qty;
  }
  return sum;
}

const order = JSON.parse('{"id": 7}');
console.log(total(order)); // CARTCALL
""",
    "js/src/cart_cjs.js": """\
function total(cart) {
  return cart.items.reduce((sum, item) => sum + item.price, 0); // CJSLINE
}

module.exports = { total };

if (require.main === module) {
  console.log(total({ id: 1 }));
}
""",
    "js/src/undefined_var.js": """\
const config = { port: 8080 };

function start() {
  return confg.port; // REFLINE
}

start();
""",
    "js/src/fetch_down.mjs": """\
const res = await fetch("http://127.0.0.1:18899/health"); // FETCHDOWN
console.log(res.status);
""",
    "js/src/fetch_404.mjs": """\
const url = process.argv[2];
const res = await fetch(url);
if (!res.ok) {
  throw new Error(`HTTP ${res.status} ${res.statusText} for ${url}`); // FETCH404
}
console.log(await res.text());
""",
    "js/src/read_json.js": """\
const fs = require("fs");

const raw = fs.readFileSync(process.argv[2], "utf8");
const data = JSON.parse(raw); // JSONPARSE
console.log(data.service);
""",
    "js/src/reject.mjs": """\
async function connect() {
  throw new Error("database handshake failed: invalid protocol version 3"); // REJECTLINE
}

await connect();
""",
    "js/src/missing_import.mjs": """\
import { slugify } from "./util/slug.mjs"; // IMPORTLINE

console.log(slugify("Hello World"));
""",
    "js/src/warn_ok.js": """\
console.warn("DeprecationWarning: config.errors is deprecated, use config.onError");
console.error("retrying request after ECONNRESET (attempt 1 of 3)");
console.log("request ok after 2 attempts");
""",
    "js/src/handled.js": """\
try {
  JSON.parse("{oops");
} catch (error) {
  console.log(`caught expected error: ${error.name}: ${error.message}`);
}
console.log("parser self-test passed");
""",
    "js/test/slug.test.mjs": """\
import test from "node:test";
import assert from "node:assert/strict";

function slug(s) {
  return s.toLowerCase().replace(/ /g, "_");
}

test("slug joins words with dashes", () => {
  assert.equal(slug("Hello World"), "hello-world"); // NODETESTLINE
});

test("slug lowercases", () => {
  assert.equal(slug("ABC"), "abc");
});
""",
    "js/test/errors.test.mjs": """\
import test from "node:test";
import assert from "node:assert/strict";

function classify(err) {
  return err.code === "ECONNRESET" ? "retry" : "fail";
}

test("ECONNRESET errors are retried", () => {
  const err = new Error("read ECONNRESET");
  err.code = "ECONNRESET";
  assert.equal(classify(err), "retry");
});

test("other errors fail the request", () => {
  assert.equal(classify(new Error("boom")), "fail");
});
""",
    # ---------------------------------------------------------------- jest
    "jt/package.json": '{"name": "jt", "version": "1.0.0"}\n',
    "jt/cart.js": """\
function total(items) {
  return items.reduce((sum, item) => sum + item.price * item.qty, 0);
}

function applyCoupon(cart, coupon) {
  return cart.total - coupon.amount; // COUPONLINE
}

module.exports = { total, applyCoupon };
""",
    "jt/cart.test.js": """\
const { total, applyCoupon } = require("./cart");

test("total sums price times quantity", () => {
  expect(total([{ price: 2, qty: 3 }, { price: 1, qty: 1 }])).toBe(8); // JESTASSERT
});

test("coupon is subtracted", () => {
  expect(applyCoupon({ total: 10 }, undefined)).toBe(10);
});
""",
    "jt/slow.test.js": """\
test("fetches the report", async () => {
  await new Promise((resolve) => setTimeout(resolve, 2000)); // JESTSLOW
  expect(true).toBe(true);
}, 300);
""",
    "jt/ok.test.js": """\
test("error handler logs and recovers", () => {
  console.error("Error: simulated failure (expected by this test)");
  expect(() => { throw new Error("boom"); }).toThrow("boom");
});

test("failed requests are counted", () => {
  expect([1, 2].length).toBe(2);
});
""",
    "jt/syntax.test.js": """\
const { total } = require("./cart");

test("broken", () => {
  expect(total([]).toBe(0);
});
""",
    # ---------------------------------------------------------------- vitest
    "vt/package.json": '{"name": "vt", "version": "1.0.0", "type": "module"}\n',
    "vt/math.test.js": """\
import { expect, test } from "vitest";

function mean(xs) {
  return xs.reduce((a, b) => a + b, 0) / (xs.length + 1);
}

test("mean of three numbers", () => {
  expect(mean([1, 2, 3])).toBe(2); // VITESTASSERT
});
""",
    "vt/slow.test.js": """\
import { test } from "vitest";

test("waits for the queue to drain", async () => {
  await new Promise((resolve) => setTimeout(resolve, 1000)); // VITESTSLOW
}, 100);
""",
    "vt/ok.test.js": """\
import { expect, test } from "vitest";

test("logs an error and carries on", () => {
  console.error("Error: cache unavailable, falling back to disk");
  expect(1 + 1).toBe(2);
});
""",
    # ---------------------------------------------------------------- mocha
    "mo/package.json": '{"name": "mo", "version": "1.0.0"}\n',
    "mo/test/parse.spec.js": """\
const assert = require("assert");

function parseDuration(text) {
  return parseInt(text, 10);
}

describe("parseDuration", function () {
  it("understands minutes", function () {
    assert.strictEqual(parseDuration("2m"), 120); // MOCHAASSERT
  });
  it("understands plain seconds", function () {
    assert.strictEqual(parseDuration("30"), 30);
  });
});
""",
    "mo/slow/slow.spec.js": """\
describe("report", function () {
  it("renders in time", function (done) {
    setTimeout(done, 500); // MOCHASLOW
  }).timeout(50);
});
""",
    "mo/ok/ok.spec.js": """\
const assert = require("assert");

describe("error handling", function () {
  it("reports failing requests", function () {
    assert.throws(() => { throw new Error("request failed"); }, /failed/);
  });
  it("returns 0 errors for a clean run", function () {
    assert.strictEqual([].length, 0);
  });
});
""",
    # ---------------------------------------------------------------- typescript
    "ts/tsconfig.json": '{"compilerOptions": {"strict": true, "noEmit": true, "target": "es2022", '
                        '"module": "commonjs", "types": []}, "include": ["src"]}\n',
    "ts/src/user.ts": """\
interface User {
  id: number;
  name: string;
}

export function label(user: User): string {
  return user.id; // TSLINE
}
""",
    "ts/ok/tsconfig.json": '{"compilerOptions": {"strict": true, "noEmit": true, "types": []}, '
                           '"include": ["*.ts"]}\n',
    "ts/ok/errors.ts": """\
export class HttpError extends Error {
  constructor(public status: number) {
    super(`request failed with status ${status}`);
  }
}
""",
    # ---------------------------------------------------------------- eslint
    "lint/eslint.config.mjs": """\
export default [
  {
    languageOptions: { sourceType: "commonjs", globals: { console: "readonly", module: "writable", require: "readonly" } },
    rules: { "no-unused-vars": "error", "no-undef": "error", "eqeqeq": "warn" },
  },
];
""",
    "lint/src/server.js": """\
const http = require("http");
const unused = 42; // ESLINTUNUSED

function handler(req, res) {
  res.end(reponse); // ESLINTUNDEF
}

module.exports = handler;
""",
    "lint/src/util.js": """\
function same(a, b) {
  return a == b; // ESLINTWARN
}

module.exports = same;
""",
    "lint/src/clean.js": """\
function add(a, b) {
  return a + b;
}

module.exports = add;
""",
    # ---------------------------------------------------------------- C / C++
    "c/vec.cpp": """\
#include <string>
#include <vector>

int main() {
    std::vector<int> v = {1, 2, 3};
    std::string s = v; // CPPLINE
    return 0;
}
""",
    "c/undeclared.c": """\
#include <stdio.h>

int main(void) {
    int total = 0;
    for (int i = 0; i < 3; i++) {
        totl += i; // CLINE
    }
    printf("%d\\n", total);
    return 0;
}
""",
    "c/overflow.c": """\
#include <stdlib.h>

int main(void) {
    int *a = malloc(4 * sizeof(int));
    for (int i = 0; i <= 4; i++) {
        a[i] = i; // ASANLINE
    }
    free(a);
    return 0;
}
""",
    "c/open_config.c": """\
#include <stdio.h>

int main(void) {
    FILE *f = fopen("config.ini", "r");
    if (!f) {
        perror("open config.ini");
        return 1;
    }
    fclose(f);
    return 0;
}
""",
    "c/warn.c": """\
#include <stdio.h>

int main(void) {
    int unused_error_count;
    printf("built ok\\n");
    return 0;
}
""",
    "c/throw.cpp": """\
#include <stdexcept>

void load() {
    throw std::runtime_error("config version 3 is not supported");
}

int main() {
    load();
}
""",
    # ---------------------------------------------------------------- cmake / ctest
    "cm/CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.13)
project(calc C)
enable_testing()
add_executable(test_math test_math.c)
add_test(NAME math_add COMMAND test_math add)
add_test(NAME math_error_handling COMMAND test_math errors)
""",
    "cm/test_math.c": """\
#include <assert.h>
#include <string.h>

static int add(int a, int b) { return a + b + (a == 2); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "add") == 0) {
        assert(add(2, 2) == 4); // CTESTASSERT
    }
    return 0;
}
""",
    "cmbad/CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.13)
project(app C)
add_executable(app main.c)
add_library(util STATIC util.c missing_helper.c) # CMAKELINE
""",
    "cmbad/main.c": "int main(void) { return 0; }\n",
    "cmbad/util.c": "int util(void) { return 1; }\n",
    "cmbuild/CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.13)
project(app C)
add_executable(app main.c)
""",
    "cmbuild/main.c": """\
#include <stdio.h>

int main(void) {
    printf("%d\\n", count_items()); // CMBUILDLINE
    return 0
}
""",
    "cmok/CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.13)
project(ok C)
enable_testing()
add_executable(check_errors check.c)
add_test(NAME error_paths COMMAND check_errors)
add_test(NAME failed_login_rejected COMMAND check_errors)
""",
    "cmok/check.c": "int main(void) { return 0; }\n",
    # ---------------------------------------------------------------- rust
    "rs/Cargo.toml": '[package]\nname = "rs"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rs/src/main.rs": """\
fn consume(v: Vec<String>) -> usize {
    v.len()
}

fn main() {
    let names = vec![String::from("ada"), String::from("bob")];
    let n = consume(names);
    println!("{} {}", n, names.len()); // RSMOVED
}
""",
    "rsclippy/Cargo.toml": '[package]\nname = "rsclippy"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rsclippy/src/lib.rs": """\
pub fn is_empty_name(name: &String) -> bool {
    name.len() == 0 // CLIPPYLINE
}
""",
    "rstest/Cargo.toml": '[package]\nname = "rstest"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rstest/src/lib.rs": """\
pub fn celsius(f: f64) -> f64 {
    (f - 32.0) * 5.0 / 8.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boiling_point() {
        assert_eq!(celsius(212.0), 100.0); // RSTESTLINE
    }

    #[test]
    fn error_free_freezing_point() {
        assert_eq!(celsius(32.0), 0.0);
    }
}
""",
    "rspanic/Cargo.toml": '[package]\nname = "rspanic"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rspanic/src/main.rs": """\
use std::collections::HashMap;

fn port(env: &HashMap<&str, &str>) -> u16 {
    env.get("PORT").unwrap().parse().unwrap() // RSPANICLINE
}

fn main() {
    let env = HashMap::new();
    println!("{}", port(&env));
}
""",
    "rsindex/Cargo.toml": '[package]\nname = "rsindex"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rsindex/src/main.rs": """\
fn main() {
    let shards = vec![1, 2, 3];
    let pick = std::env::args().count() + 4;
    println!("{}", shards[pick]); // RSINDEXLINE
}
""",
    "rsok/Cargo.toml": '[package]\nname = "rsok"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rsok/src/lib.rs": """\
pub fn parse_port(raw: &str) -> Result<u16, String> {
    raw.parse().map_err(|e| format!("invalid port {raw:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_with_error() {
        assert!(parse_port("x").is_err());
    }

    #[test]
    #[should_panic(expected = "failed")]
    fn panics_when_told_to() {
        panic!("failed on purpose");
    }
}
""",
    "rsimport/Cargo.toml": '[package]\nname = "rsimport"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rsimport/src/main.rs": """\
use std::collections::HashMapp; // RSIMPORTLINE

fn main() {
    let m: HashMapp<u8, u8> = HashMapp::new();
    println!("{}", m.len());
}
""",
    "rswarn/Cargo.toml": '[package]\nname = "rswarn"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rswarn/src/main.rs": """\
fn main() {
    let error_count = 0;
    let unused_panic_flag = true;
    println!("errors: {}", error_count);
}
""",
    # ---------------------------------------------------------------- go
    "go/go.mod": "module example.com/app\n\ngo 1.19\n",
    "go/build/main.go": """\
package main

import "fmt"

func main() {
	total := 3
	fmt.Println(totl) // GOBUILDLINE
}
""",
    "go/vet/main.go": """\
package main

import "fmt"

func main() {
	name := "ada"
	fmt.Printf("%d\\n", name) // GOVETLINE
}
""",
    "go/calc/calc.go": """\
package calc

func Add(a, b int) int { return a - b }

func Div(a, b int) int { return a / b }
""",
    "go/calc/calc_test.go": """\
package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 3); got != 5 {
		t.Errorf("Add(2, 3) = %d; want 5", got) // GOTESTLINE
	}
}

func TestErrorFreeDiv(t *testing.T) {
	if Div(6, 3) != 2 {
		t.Fatal("bad division")
	}
}
""",
    "go/panicky/main.go": """\
package main

import "fmt"

func main() {
	var counts map[string]int
	counts["requests"]++ // GOPANICLINE
	fmt.Println(counts)
}
""",
    "go/slow/slow_test.go": """\
package slow

import (
	"testing"
	"time"
)

func TestDrainQueue(t *testing.T) {
	time.Sleep(3 * time.Second) // GOSLOWLINE
}
""",
    "go/idx/idx.go": """\
package idx

func Last(xs []int) int { return xs[len(xs)] } // GOIDXLINE
""",
    "go/idx/idx_test.go": """\
package idx

import "testing"

func TestLast(t *testing.T) {
	if Last([]int{1, 2}) != 2 {
		t.Fatal("wrong")
	}
}
""",
    "go/ok/errs.go": """\
package ok

import "errors"

var ErrNotFound = errors.New("not found")

func Find(key string) error {
	if key == "" {
		return ErrNotFound
	}
	return nil
}
""",
    "go/ok/errs_test.go": """\
package ok

import (
	"errors"
	"testing"
)

func TestFindReturnsErrorForEmptyKey(t *testing.T) {
	if !errors.Is(Find(""), ErrNotFound) {
		t.Fatal("want ErrNotFound")
	}
}

func TestFailedLookupPanicsNever(t *testing.T) {
	t.Log("panic: not really, just a log line")
	if Find("x") != nil {
		t.Fatal("unexpected error")
	}
}
""",
    "go/dep/main.go": """\
package main

import "github.com/acme/retry" // GODEPLINE

func main() { retry.Do() }
""",
    # ---------------------------------------------------------------- ruby
    "rb/lib/calc.rb": """\
class Calc
  def self.add(a, b)
    a - b
  end

  def self.average(xs)
    xs.sum / xs.size
  end
end
""",
    "rb/spec/calc_spec.rb": """\
require_relative "../lib/calc"

RSpec.describe Calc do
  it "adds two numbers" do
    expect(Calc.add(2, 3)).to eq(5) # RSPECLINE
  end

  it "averages" do
    expect(Calc.average([2, 4])).to eq(3)
  end
end
""",
    "rb/spec/nil_spec.rb": """\
require_relative "../lib/calc"

RSpec.describe "averages of nothing" do
  it "handles nil" do
    expect(Calc.average(nil)).to eq(0)
  end
end
""",
    "rb/spec/ok_spec.rb": """\
RSpec.describe "error handling" do
  it "raises an error for a failed login" do
    expect { raise ArgumentError, "failed login" }.to raise_error(ArgumentError, /failed/)
  end

  it "reports 0 failures for a clean run" do
    expect([].size).to eq(0)
  end
end
""",
    "rb/nomethod.rb": """\
def greet(user)
  "hello " + user[:name].upcase # RBNOMETHOD
end

puts greet({ nick: "ada" })
""",
    "rb/syntax.rb": """\
def total(items)
  items.each do |i|
    puts i
end
""",
    "rb/needs_gem.rb": """\
require "httparty_missing" # RBLOADLINE

puts HTTParty.get("http://example.com")
""",
    # ---------------------------------------------------------------- php
    "php/parse.php": """\
<?php
function total(array $items): int {
    $sum = 0
    foreach ($items as $i) { // PHPPARSE
        $sum += $i;
    }
    return $sum;
}
""",
    "php/uncaught.php": """\
<?php
function load_config(string $path): array {
    if (!file_exists($path)) {
        throw new RuntimeException("config file $path not found"); // PHPTHROW
    }
    return [];
}

load_config("/etc/app/config.php");
""",
    "php/typeerror.php": """\
<?php
declare(strict_types=1);

function port(int $p): int { return $p; }

echo port("8080"); // PHPTYPE
""",
    "php/warning.php": """\
<?php
$errors = [];
echo "processed " . count($errors) . " errors\\n";
echo "user: " . $name . "\\n";
""",
    "php/ok.php": """\
<?php
try {
    throw new InvalidArgumentException("bad input");
} catch (InvalidArgumentException $e) {
    echo "handled error: " . $e->getMessage() . "\\n";
}
""",
    # ---------------------------------------------------------------- java / maven
    "jv/pom.xml": """\
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>app</groupId>
  <artifactId>calc</artifactId>
  <version>1.0</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>org.junit.jupiter</groupId>
      <artifactId>junit-jupiter</artifactId>
      <version>5.10.2</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-resources-plugin</artifactId><version>3.3.1</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId><version>3.13.0</version></plugin>
      <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-surefire-plugin</artifactId><version>3.2.5</version></plugin>
    </plugins>
  </build>
</project>
""",
    "jv/src/main/java/app/Calc.java": """\
package app;

public class Calc {
    public static int add(int a, int b) {
        return a - b;
    }

    public static int length(String s) {
        return s.trim().length(); // JAVANPE
    }
}
""",
    "jv/src/test/java/app/CalcTest.java": """\
package app;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class CalcTest {
    @Test
    void addsTwoNumbers() {
        assertEquals(5, Calc.add(2, 3)); // JUNITASSERT
    }

    @Test
    void lengthOfNothing() {
        assertEquals(0, Calc.length(null)); // JUNITNPE
    }
}
""",
    "jvbad/src/main/java/app/Broken.java": """\
package app;

public class Broken {
    public static int parse(String s) {
        int n = s; // MVNCOMPILE
        return n;
    }
}
""",
    "jvok/src/main/java/app/Errors.java": """\
package app;

public class Errors {
    public static String describe(Exception e) {
        return "error: " + e.getMessage();
    }
}
""",
    "jvok/src/test/java/app/ErrorsTest.java": """\
package app;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class ErrorsTest {
    @Test
    void describesFailedRequestErrors() {
        System.err.println("WARN simulated IOException: connection reset (expected)");
        assertEquals("error: boom", Errors.describe(new RuntimeException("boom")));
    }
}
""",
    "jvdep/src/main/java/app/App.java": "package app;\n\npublic class App {}\n",
    "java/Main.java": """\
public class Main {
    static int pick(int[] shards, int i) {
        return shards[i]; // JAVAAIOOBE
    }

    public static void main(String[] args) {
        System.out.println(pick(new int[] {1, 2, 3}, 3));
    }
}
""",
    "java/Symbol.java": """\
public class Symbol {
    public static void main(String[] args) {
        System.out.println(Helper.greet("ada")); // JAVACSYM
    }
}
""",
    "java/Handled.java": """\
public class Handled {
    public static void main(String[] args) {
        try {
            Integer.parseInt("x");
        } catch (NumberFormatException e) {
            System.out.println("caught java.lang.NumberFormatException: " + e.getMessage() + " (falling back to 0)");
        }
        System.out.println("done, 0 errors");
    }
}
""",
    # ---------------------------------------------------------------- perl
    "pl/app.pl": """\
use strict;
use warnings;

my $path = "data/customers.csv";
open(my $fh, "<", $path) or die "Cannot open $path: $!"; # PERLDIE
print while <$fh>;
""",
    "pl/bad.pl": """\
use strict;
use warnings;

my %totals = (a => 1
print "done\\n";
""",
    "pl/uses.pl": """\
use strict;
use JSON::Tiny::Missing; # PERLUSE

print "ok\\n";
""",
    "pl/warn.pl": """\
use strict;
use warnings;

my %seen;
my $errors = $seen{errors};
print "errors: " . ($errors // 0) . "\\n";
print "value: $seen{missing}\\n";
""",
    "pl/div.pl": """\
use strict;
use warnings;

my @counts = ();
my $avg = 10 / scalar(@counts); # PERLDIV
print "$avg\\n";
""",
    # ---------------------------------------------------------------- shell
    "sh/deploy.sh": """\
#!/bin/bash
target=$1
cp build/app $target # SHELLCHECKLINE
echo "deployed to $target"
""",
    "sh/clean.sh": """\
#!/bin/bash
set -euo pipefail
echo "no errors found in $(pwd)"
""",
    "sh/run.sh": """\
#!/bin/bash
set -e
echo "building"
mkdir -p out
run_migrations --all # SHRUNLINE
echo "done"
""",
    "sh/unbound.sh": """\
#!/bin/bash
set -u
echo "deploying ${RELEASE_TAG}" # SHUNBOUND
""",
    # ---------------------------------------------------------------- sql
    "sql/report.sql": """\
create table customers (id integer primary key, name text);
insert into customers values (1, 'ada');
select nme from customers; -- SQLITELINE
""",
    "sql/unique.sql": """\
create table users (email text unique);
insert into users values ('ada@example.com');
insert into users values ('ada@example.com'); -- SQLITEUNIQUE
""",
    "sql/errors_table.sql": """\
create table errors (id integer, message text);
insert into errors values (1, 'connection refused'), (2, 'Segmentation fault in worker');
select id, message from errors order by id;
""",
    "sql/migrate.sql": """\
begin;
create temp table accounts (id int primary key);
create tabel ledger (id int); -- PSQLLINE
commit;
""",
    # ---------------------------------------------------------------- logs and docs (content)
    "logs/app.log": """\
2026-05-02 10:14:01,120 INFO  api: listening on :8080
2026-05-02 10:14:07,481 ERROR db: connection refused (127.0.0.1:5432), retrying in 2s
2026-05-02 10:14:09,502 INFO  db: connected
2026-05-02 10:15:12,004 WARN  api: slow request GET /reports took 2.3s
2026-05-02 10:16:40,877 ERROR worker: job 812 failed: TimeoutError: read timed out; requeued
2026-05-02 10:16:43,010 INFO  worker: job 812 done on attempt 2
""",
    "logs/deploy.log": """\
[2026-05-02T10:00:00Z] deploy started (release 4.2.0)
[2026-05-02T10:00:03Z] health check failed: connect ECONNREFUSED 10.0.0.5:8080 (attempt 1/5)
[2026-05-02T10:00:08Z] health check ok (attempt 2/5)
[2026-05-02T10:00:09Z] deploy finished: 0 errors
""",
    "docs/troubleshooting.md": """\
# Troubleshooting

## The worker crashes with `Segmentation fault (core dumped)`

This happens when the image library is older than 2.1. Upgrade it.

## `panic: runtime error: invalid memory address or nil pointer dereference`

The Go sidecar panics like this when `CONFIG_PATH` is unset:

    panic: runtime error: invalid memory address or nil pointer dereference
    [signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x4553a2]

Set `CONFIG_PATH` and restart it.

## npm ERR! code ERESOLVE

Run `npm install --legacy-peer-deps` once.
""",
    "docs/errors.md": """\
# Error codes

| code | meaning |
|---|---|
| E001 | FileNotFoundError: the input file is missing |
| E002 | Permission denied while writing the report |
| E003 | HTTP 503 from the billing service; the client retries |
""",
}

HERE_LINES: dict[str, dict[str, int]] = {}


def at(path: str, marker: str) -> str:
    """``path:N`` where line N of ``FILES[path]`` contains ``marker`` (the labels name lines by content)."""
    for number, line in enumerate(FILES[path].splitlines(), start=1):
        if marker in line:
            return f"{path}:{number}"
    raise KeyError(f"{marker!r} not in {path}")


SERVE = "python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & srv=$!; sleep 1; "
STOP = "; rc=$?; kill $srv; exit $rc"


def served(port: int, command: str) -> str:
    return SERVE.format(port=port) + command + STOP


SLOW_SERVER = (
    "python3 -c \"import http.server,time\nclass H(http.server.BaseHTTPRequestHandler):\n"
    " def do_GET(self):\n  time.sleep(3); self.send_response(200); self.end_headers()\n"
    " def log_message(self,*a): pass\nhttp.server.HTTPServer(('127.0.0.1',{port}),H).serve_forever()\" & "
    "srv=$!; sleep 1; "
)

MVN = "mvn -o -B -Dstyle.color=never"
E, S = True, False  # expected_error

# name, toolchain, command, expected_error, expected_class, primary refs, expected_text_error ("same" = as
# expected_error when there is output)
CASES: list[tuple[str, str, str, bool, str | None, list[str], object]] = [
    # ---------------------------------------------------------------- python
    ("py_json_decode_data_file", "python", "python3 py/load_config.py config/settings.json", E,
     "python_exception", [at("py/load_config.py", "LOADCALL") + "|py/load_config.py:10", "config/settings.json:4"],
     "same"),
    ("py_yaml_scanner_error", "python", "/usr/bin/python3 py/load_yaml.py config/app.yaml", E, "python_exception",
     ["config/app.yaml:9|config/app.yaml:8"], "same"),
    ("py_keyerror_in_csv_loop", "python", "python3 py/report.py data/orders.csv", E, "python_exception",
     [at("py/report.py", "KEYLINE")], "same"),
    ("py_urllib_http_404", "python", served(18801, "python3 py/fetch_status.py http://127.0.0.1:18801/v1/status"),
     E, "http", [at("py/fetch_status.py", "URLOPEN")], "same"),
    ("py_sqlite_no_such_table", "python", "python3 py/db_report.py", E, "sql_error",
     [at("py/db_report.py", "SQLLINE")], "same"),
    ("py_subprocess_timeout", "python", "python3 py/slow_child.py", E, "timeout",
     [at("py/slow_child.py", "TIMEOUTLINE")], "same"),
    ("py_retry_logged_then_ok", "python", "python3 py/retry_ok.py", S, None, [], "same"),
    ("py_zero_division_in_function", "python", "python3 py/divide.py", E, "python_exception",
     [at("py/divide.py", "DIVLINE")], "same"),
    ("pytest_assert_fail", "pytest", "cd py && python3 -m pytest -q -p no:cacheprovider tests/test_prices.py", E,
     "test_failure", ["py/tests/test_prices.py:9"], "same"),
    ("pytest_pass_expects_econnreset", "pytest",
     "cd py && python3 -m pytest -v -s -p no:cacheprovider tests/test_reconnect.py", S, None, [], "same"),
    ("mypy_missing_return_and_type", "python", "python3 -m mypy --strict --no-error-summary --no-incremental "
     "py/typed_app.py", E, "compile_error", ["py/typed_app.py:1"], "same"),
    ("py_json_tool_ok", "python", "python3 -m json.tool config/good.json", S, None, [], "same"),
    ("py_check_env_error_exit2", "python", "python3 py/check_env.py", E, "error", [], "same"),
    ("py_grep_error_in_logs", "python", "grep -n ERROR logs/app.log", S, None, [], "same"),
    ("py_cat_troubleshooting", "python", "cat docs/troubleshooting.md", S, None, [], "same"),
    ("py_cat_errors_doc", "python", "cat docs/errors.md", S, None, [], "same"),
    ("py_tail_deploy_log", "python", "tail -n 4 logs/deploy.log", S, None, [], "same"),
    # ---------------------------------------------------------------- node
    ("node_esm_type_error", "node", "node js/src/cart.mjs", E, "js_exception",
     [at("js/src/cart.mjs", "for (const item")], "same"),
    ("node_cjs_type_error", "node", "node js/src/cart_cjs.js", E, "js_exception",
     [at("js/src/cart_cjs.js", "CJSLINE")], "same"),
    ("node_reference_error", "node", "node js/src/undefined_var.js", E, "js_exception",
     [at("js/src/undefined_var.js", "REFLINE")], "same"),
    ("node_fetch_refused", "node", "node js/src/fetch_down.mjs", E, "network",
     [at("js/src/fetch_down.mjs", "FETCHDOWN")], "same"),
    ("node_fetch_http_404", "node", served(18802, "node js/src/fetch_404.mjs http://127.0.0.1:18802/api/items"),
     E, "http", [at("js/src/fetch_404.mjs", "FETCH404")], "same"),
    ("node_json_parse_data_file", "node", "node js/src/read_json.js config/settings.json", E, "syntax",
     [at("js/src/read_json.js", "JSONPARSE")], "same"),
    ("node_unhandled_rejection", "node", "node js/src/reject.mjs", E, "js_exception",
     [at("js/src/reject.mjs", "REJECTLINE")], "same"),
    ("node_esm_module_not_found", "node", "node js/src/missing_import.mjs", E, "missing_module",
     [at("js/src/missing_import.mjs", "IMPORTLINE") + "|js/src/util/slug.mjs"], "same"),
    ("node_warn_stderr_ok", "node", "node js/src/warn_ok.js", S, None, [], "same"),
    ("node_handled_error_ok", "node", "node js/src/handled.js", S, None, [], "same"),
    ("node_test_assert_fail", "node-test", "node --test js/test/slug.test.mjs", E, "test_failure",
     [at("js/test/slug.test.mjs", "NODETESTLINE")], "same"),
    ("node_test_pass_econnreset_names", "node-test", "node --test js/test/errors.test.mjs", S, None, [], "same"),
    ("node_grep_console_error", "node", "grep -rn 'console.error' js/src", S, None, [], "same"),
    # ---------------------------------------------------------------- jest
    ("jest_assert_fail", "jest", "cd jt && jest --ci cart.test.js", E, "test_failure",
     [at("jt/cart.test.js", "JESTASSERT"), at("jt/cart.js", "COUPONLINE")], "same"),
    ("jest_timeout", "jest", "cd jt && jest --ci slow.test.js", E, "timeout", ["jt/slow.test.js:1"], "same"),
    ("jest_pass_console_error", "jest", "cd jt && jest --ci ok.test.js", S, None, [], "same"),
    ("jest_syntax_error_in_test", "jest", "cd jt && jest --ci syntax.test.js", E, "syntax", ["jt/syntax.test.js:4"],
     "same"),
    ("jest_fail_piped_tail", "jest", "cd jt && jest --ci cart.test.js 2>&1 | tail -n 25", E, "test_failure",
     [at("jt/cart.test.js", "JESTASSERT")], "same"),
    # ---------------------------------------------------------------- vitest
    ("vitest_assert_fail", "vitest", "cd vt && vitest run math.test.js", E, "test_failure",
     [at("vt/math.test.js", "VITESTASSERT")], "same"),
    ("vitest_timeout", "vitest", "cd vt && vitest run slow.test.js", E, "timeout",
     ["vt/slow.test.js:3"], "same"),
    ("vitest_pass_stderr", "vitest", "cd vt && vitest run ok.test.js", S, None, [], "same"),
    # ---------------------------------------------------------------- mocha
    ("mocha_assert_fail", "mocha", "cd mo && mocha test/parse.spec.js", E, "test_failure",
     [at("mo/test/parse.spec.js", "MOCHAASSERT")], "same"),
    ("mocha_timeout", "mocha", "cd mo && mocha slow/slow.spec.js", E, "timeout", [], "same"),
    ("mocha_pass_error_names", "mocha", "cd mo && mocha ok/ok.spec.js", S, None, [], "same"),
    # ---------------------------------------------------------------- typescript
    ("tsc_type_error", "typescript", "cd ts && tsc -p tsconfig.json", E, "compile_error",
     ["ts/src/user.ts:7"], "same"),
    ("tsc_type_error_pretty", "typescript", "cd ts && tsc -p tsconfig.json --pretty", E, "compile_error",
     ["ts/src/user.ts:7"], "same"),
    ("tsc_clean_error_class", "typescript", "cd ts/ok && tsc -p tsconfig.json && echo 'tsc: 0 errors'", S, None, [],
     "same"),
    # ---------------------------------------------------------------- eslint
    ("eslint_stylish_errors", "eslint", "cd lint && eslint src/server.js", E, "lint",
     [at("lint/src/server.js", "ESLINTUNUSED"), at("lint/src/server.js", "ESLINTUNDEF")], "same"),
    ("eslint_stylish_two_files", "eslint", "cd lint && eslint src/", E, "lint",
     [at("lint/src/server.js", "ESLINTUNUSED")], "same"),
    ("eslint_warnings_only", "eslint", "cd lint && eslint src/util.js", S, None, [], "same"),
    ("eslint_max_warnings", "eslint", "cd lint && eslint --max-warnings 0 src/util.js", E, "lint",
     [at("lint/src/util.js", "ESLINTWARN")], "same"),
    ("eslint_json_format", "eslint", "cd lint && eslint -f json src/server.js | head -c 1500", E, "lint", [],
     "same"),
    ("eslint_clean", "eslint", "cd lint && eslint src/clean.js && echo 'eslint: no errors'", S, None, [], "same"),
    # ---------------------------------------------------------------- C / C++
    ("gpp_conversion_error", "gcc", "g++ -c c/vec.cpp -o /dev/null", E, "compile_error",
     [at("c/vec.cpp", "CPPLINE")], "same"),
    ("gcc_undeclared", "gcc", "gcc -c c/undeclared.c -o /dev/null", E, "compile_error",
     [at("c/undeclared.c", "CLINE")], "same"),
    ("gcc_asan_overflow", "gcc", "gcc -g -fsanitize=address c/overflow.c -o $BUILD/asan && $BUILD/asan",
     E, "crash", [at("c/overflow.c", "ASANLINE")], "same"),
    ("c_perror_missing_config", "gcc", "gcc c/open_config.c -o $BUILD/open && $BUILD/open", E,
     "missing_file", [], "same"),
    ("gcc_warning_builds", "gcc", "gcc -Wall c/warn.c -o $BUILD/warn && $BUILD/warn", S, None, [],
     "same"),
    ("gpp_uncaught_exception", "gcc", "g++ c/throw.cpp -o $BUILD/throw && $BUILD/throw", E, "crash", [],
     "same"),
    ("gcc_werror_unused", "gcc", "gcc -Wall -Werror -c c/warn.c -o /dev/null", E, "compile_error", ["c/warn.c:4"],
     "same"),
    # ---------------------------------------------------------------- cmake / ctest
    ("ctest_assert_fail", "cmake", "cmake -S cm -B $BUILD/cm >/dev/null && cmake --build $BUILD/cm "
     ">/dev/null && cd $BUILD/cm && ctest --output-on-failure", E, "test_failure",
     [at("cm/test_math.c", "CTESTASSERT")], "same"),
    ("cmake_missing_source", "cmake", "cmake -S cmbad -B $BUILD/cmbad", E, "build_failure",
     ["cmbad/CMakeLists.txt:4"], "same"),
    ("cmake_build_compile_error", "cmake", "cmake -S cmbuild -B $BUILD/cmbuild >/dev/null && "
     "cmake --build $BUILD/cmbuild", E, "compile_error", [at("cmbuild/main.c", "CMBUILDLINE")], "same"),
    ("ctest_pass_error_names", "cmake", "cmake -S cmok -B $BUILD/cmok >/dev/null && cmake --build "
     "$BUILD/cmok >/dev/null && cd $BUILD/cmok && ctest", S, None, [], "same"),
    ("cmake_configure_ok", "cmake", "cmake -S cmok -B $BUILD/cmok2", S, None, [], "same"),
    # ---------------------------------------------------------------- rust
    ("cargo_build_moved_value", "rust", "cd rs && cargo build --offline -q", E, "compile_error",
     ["rs/src/main.rs:8"], "same"),
    ("cargo_clippy_deny_warnings", "rust", "cd rsclippy && cargo clippy --offline -q -- -D warnings", E, "lint",
     ["rsclippy/src/lib.rs:1|rsclippy/src/lib.rs:2"], "same"),
    ("cargo_clippy_warnings_ok", "rust", "cd rsclippy && cargo clippy --offline -q", S, None, [], "same"),
    ("cargo_test_assert_fail", "rust", "cd rstest && cargo test --offline -q", E, "test_failure",
     [at("rstest/src/lib.rs", "RSTESTLINE")], "same"),
    ("cargo_run_unwrap_none", "rust", "cd rspanic && cargo run --offline -q", E, "panic",
     [at("rspanic/src/main.rs", "RSPANICLINE")], "same"),
    ("cargo_run_index_backtrace", "rust", "cd rsindex && RUST_BACKTRACE=1 cargo run --offline -q", E, "panic",
     [at("rsindex/src/main.rs", "RSINDEXLINE")], "same"),
    ("cargo_test_pass_should_panic", "rust", "cd rsok && cargo test --offline", S, None, [], "same"),
    ("cargo_build_unresolved_import", "rust", "cd rsimport && cargo build --offline -q", E, "compile_error",
     [at("rsimport/src/main.rs", "RSIMPORTLINE")], "same"),
    ("cargo_build_warnings_ok", "rust", "cd rswarn && cargo build --offline", S, None, [], "same"),
    ("cargo_build_error_piped_head", "rust", "cd rs && cargo build --offline 2>&1 | head -n 20", E, "compile_error",
     ["rs/src/main.rs:8"], "same"),
    # ---------------------------------------------------------------- go
    ("go_build_undefined", "go", "cd go && go build -o /dev/null ./build/", E, "compile_error",
     [at("go/build/main.go", "GOBUILDLINE")], "same"),
    ("go_vet_printf", "go", "cd go && go vet ./vet/", E, "lint", [at("go/vet/main.go", "GOVETLINE")], "same"),
    ("go_test_fail", "go", "cd go && go test ./calc/", E, "test_failure", [at("go/calc/calc_test.go", "GOTESTLINE")],
     "same"),
    ("go_test_fail_verbose", "go", "cd go && go test -v ./calc/", E, "test_failure",
     [at("go/calc/calc_test.go", "GOTESTLINE")], "same"),
    ("go_run_nil_map_panic", "go", "cd go && go run ./panicky/", E, "panic",
     [at("go/panicky/main.go", "GOPANICLINE")], "same"),
    ("go_test_timeout", "go", "cd go && go test -timeout 1s ./slow/", E, "timeout",
     [at("go/slow/slow_test.go", "GOSLOWLINE")], "same"),
    ("go_test_index_panic", "go", "cd go && go test ./idx/", E, "panic", [at("go/idx/idx.go", "GOIDXLINE")], "same"),
    ("go_test_pass_verbose_error_names", "go", "cd go && go test -v ./ok/", S, None, [], "same"),
    ("go_missing_module", "go", "cd go && go build -o /dev/null ./dep/", E, "missing_module", [at("go/dep/main.go", "GODEPLINE")],
     "same"),
    ("go_vet_clean", "go", "cd go && go vet ./ok/ ./calc/ && echo 'vet: no problems'", S, None, [], "same"),
    ("go_grep_panic_in_source", "go", "grep -rn 'panic\\|Errorf' go/", S, None, [], "same"),
    # ---------------------------------------------------------------- ruby
    ("rspec_assert_fail", "ruby", "cd rb && rspec spec/calc_spec.rb", E, "test_failure",
     [at("rb/spec/calc_spec.rb", "RSPECLINE")], "same"),
    ("rspec_nomethod_in_code", "ruby", "cd rb && rspec spec/nil_spec.rb", E, "test_failure",
     ["rb/lib/calc.rb:7"], "same"),
    ("rspec_pass_error_names", "ruby", "cd rb && rspec spec/ok_spec.rb", S, None, [], "same"),
    ("ruby_nomethod_error", "ruby", "ruby rb/nomethod.rb", E, "exception", [at("rb/nomethod.rb", "RBNOMETHOD")],
     "same"),
    ("ruby_syntax_error", "ruby", "ruby rb/syntax.rb", E, "syntax", ["rb/syntax.rb:4|rb/syntax.rb:5"], "same"),
    ("ruby_load_error", "ruby", "ruby rb/needs_gem.rb", E, "missing_module", [at("rb/needs_gem.rb", "RBLOADLINE")],
     "same"),
    ("ruby_syntax_check_ok", "ruby", "ruby -wc rb/lib/calc.rb", S, None, [], "same"),
    # ---------------------------------------------------------------- php
    ("php_parse_error", "php", "php php/parse.php", E, "syntax", [at("php/parse.php", "PHPPARSE")], "same"),
    ("php_lint_parse_error", "php", "php -l php/parse.php", E, "syntax", [at("php/parse.php", "PHPPARSE")], "same"),
    ("php_uncaught_exception", "php", "php php/uncaught.php", E, "exception", [at("php/uncaught.php", "PHPTHROW")],
     "same"),
    ("php_type_error", "php", "php php/typeerror.php", E, "exception", [at("php/typeerror.php", "PHPTYPE")], "same"),
    ("php_warning_runs", "php", "php php/warning.php", S, None, [], "same"),
    ("php_lint_ok", "php", "php -l php/ok.php", S, None, [], "same"),
    ("php_handled_exception", "php", "php php/ok.php", S, None, [], "same"),
    # ---------------------------------------------------------------- java / maven
    ("mvn_junit_failures", "java", f"cd jv && {MVN} -q test", E, "test_failure",
     [at("jv/src/test/java/app/CalcTest.java", "JUNITASSERT"),
      at("jv/src/main/java/app/Calc.java", "JAVANPE")], "same"),
    ("mvn_junit_failures_tail", "java", f"cd jv && {MVN} test 2>&1 | tail -n 30", E, "test_failure",
     [at("jv/src/test/java/app/CalcTest.java", "JUNITASSERT")], "same"),
    ("mvn_compile_error", "java", f"cd jvbad && {MVN} -q compile", E, "compile_error",
     [at("jvbad/src/main/java/app/Broken.java", "MVNCOMPILE")], "same"),
    ("mvn_test_pass", "java", f"cd jvok && {MVN} test", S, None, [], "same"),
    ("mvn_missing_dependency", "java", f"cd jvdep && {MVN} -q compile", E, "build_failure", [], "same"),
    ("java_array_index", "java", "cd java && javac -d $BUILD/java Main.java && java -cp $BUILD/java Main",
     E, "java_exception", [at("java/Main.java", "JAVAAIOOBE")], "same"),
    ("javac_cannot_find_symbol", "java", "cd java && javac -d $BUILD/java Symbol.java", E, "compile_error",
     [at("java/Symbol.java", "JAVACSYM")], "same"),
    ("java_handled_exception", "java", "cd java && javac -d $BUILD/java Handled.java && "
     "java -cp $BUILD/java Handled", S, None, [], "same"),
    # ---------------------------------------------------------------- perl
    ("perl_die_missing_file", "perl", "perl pl/app.pl", E, "missing_file", [at("pl/app.pl", "PERLDIE")], "same"),
    ("perl_syntax_error", "perl", "perl pl/bad.pl", E, "syntax", ["pl/bad.pl:5|pl/bad.pl:4"], "same"),
    ("perl_missing_module", "perl", "perl pl/uses.pl", E, "missing_module", [at("pl/uses.pl", "PERLUSE")], "same"),
    ("perl_warnings_ok", "perl", "perl pl/warn.pl", S, None, [], "same"),
    ("perl_division_by_zero", "perl", "perl pl/div.pl", E, "exception", [at("pl/div.pl", "PERLDIV")], "same"),
    ("perl_syntax_check_ok", "perl", "perl -c pl/warn.pl", S, None, [], "same"),
    # ---------------------------------------------------------------- shell
    ("shellcheck_tty_format", "shell", "shellcheck sh/deploy.sh", E, "lint",
     [at("sh/deploy.sh", "SHELLCHECKLINE")], "same"),
    ("shellcheck_gcc_format", "shell", "shellcheck -f gcc sh/deploy.sh", E, "lint",
     [at("sh/deploy.sh", "SHELLCHECKLINE")], "same"),
    ("shellcheck_clean", "shell", "shellcheck sh/clean.sh && bash sh/clean.sh", S, None, [], "same"),
    ("bash_script_command_not_found", "shell", "bash sh/run.sh", E, "missing_command",
     [at("sh/run.sh", "SHRUNLINE")], "same"),
    ("bash_unbound_variable", "shell", "bash sh/unbound.sh", E, "error", [at("sh/unbound.sh", "SHUNBOUND")], "same"),
    # ---------------------------------------------------------------- git
    ("git_apply_patch_fails", "git", "cd repo && git apply ../fix.patch", E, "git", ["src/app.py:1"], "same"),
    ("git_checkout_unknown_branch", "git", "cd repo && git checkout feature-x", E, "git", [], "same"),
    ("git_log_crash_fixes", "git", "cd repo && git log --oneline", S, None, [], "same"),
    ("git_grep_raise", "git", "cd repo && git grep -n 'raise'", S, None, [], "same"),
    ("git_show_error_commit", "git", "cd repo && git show --stat HEAD", S, None, [], "same"),
    ("git_commit_nothing", "git", "cd repo && git commit -m 'fix failing test'", E, "git", [], "same"),
    # ---------------------------------------------------------------- sqlite
    ("sqlite_script_no_such_column", "sql", "sqlite3 :memory: < sql/report.sql", E, "sql_error",
     [at("sql/report.sql", "SQLITELINE")], "same"),
    ("sqlite_no_such_table", "sql", "sqlite3 :memory: 'select * from invoices'", E, "sql_error", [], "same"),
    ("sqlite_syntax_error", "sql", "sqlite3 :memory: 'selec * from invoices'", E, "sql_error", [], "same"),
    ("sqlite_unique_constraint", "sql", "sqlite3 :memory: < sql/unique.sql", E, "sql_error",
     [at("sql/unique.sql", "SQLITEUNIQUE")], "same"),
    ("sqlite_rows_mention_errors", "sql", "sqlite3 :memory: < sql/errors_table.sql", S, None, [], "same"),
    # ---------------------------------------------------------------- psql
    ("psql_relation_missing", "sql", "psql -X -d postgres -c 'select * from missing_orders'", E, "sql_error", [],
     "same"),
    ("psql_file_syntax_error", "sql", "psql -X -v ON_ERROR_STOP=1 -d postgres -f sql/migrate.sql", E, "sql_error",
     [at("sql/migrate.sql", "PSQLLINE")], "same"),
    ("psql_notice_ok", "sql", "psql -X -d postgres -c 'drop table if exists errors_archive'", S, None, [], "same"),
    ("psql_connection_refused", "sql", "psql -X -h 127.0.0.1 -p 5499 -d postgres -c 'select 1'", E, "network", [],
     "same"),
    ("psql_select_error_rows", "sql",
     "psql -X -d postgres -c \"select 'ERROR: disk full' as last_error, 0 as failed\"", S, None, [], "same"),
    # ---------------------------------------------------------------- curl
    ("curl_fail_404", "curl", served(18803, "curl -fsS http://127.0.0.1:18803/api/v2/users"), E, "http", [],
     "same"),
    ("curl_fail_404_verbose", "curl", served(18804, "curl -f http://127.0.0.1:18804/missing.json"), E, "http", [],
     "same"),
    ("curl_500_from_server", "curl",
     "python3 -c \"import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n def do_GET(self):\n"
     "  self.send_error(500, 'Internal Server Error')\n def log_message(self,*a): pass\n"
     "http.server.HTTPServer(('127.0.0.1',18805),H).serve_forever()\" & srv=$!; sleep 1; "
     "curl -fsS http://127.0.0.1:18805/jobs" + STOP, E, "http", [], "same"),
    ("curl_timeout", "curl", SLOW_SERVER.format(port=18806) + "curl -sS --max-time 1 http://127.0.0.1:18806/slow"
     + STOP, E, "timeout", [], "same"),
    ("curl_json_with_error_field", "curl", served(18807, "curl -fsS http://127.0.0.1:18807/config/good.json"), S,
     None, [], "same"),
    ("curl_no_fail_flag_404_body", "curl", served(18808, "curl -s http://127.0.0.1:18808/nope"), S, None, [], "same"),
    ("curl_head_ok", "curl", served(18809, "curl -sI http://127.0.0.1:18809/docs/errors.md"), S, None, [], "same"),
]

# More shapes per toolchain, added once the first round showed what each tool prints; labelled the same way.
FILES.update({
    "py/tests/test_fixture_error.py": """\
import pytest


@pytest.fixture
def db():
    raise RuntimeError("database not reachable: connection refused")  # FIXTURELINE


def test_query(db):
    assert db
""",
    "py/nested_call.py": """\
import json


def parse(payload):
    return json.loads(payload)["items"]  # NESTEDLINE


def handler(event):
    return len(parse(event["body"]))


print(handler({"body": '{"count": 3}'}))
""",
    "py/attr.py": """\
class Order:
    pass


def ship(order):
    return order.address.upper()  # ATTRLINE


print(ship(Order()))
""",
    "js/src/range.js": """\
function pad(n) {
  return "0".repeat(n); // RANGELINE
}

console.log(pad(-1));
""",
    "jt/multi.test.js": """\
const { total } = require("./cart");

describe("totals", () => {
  test("empty cart is zero", () => {
    expect(total([])).toBe(0);
  });
  test("quantities multiply", () => {
    expect(total([{ price: 5, qty: 2 }])).toEqual(12); // JESTMULTI
  });
});
""",
    "vt/throws.test.js": """\
import { expect, test } from "vitest";

function parse(text) {
  return JSON.parse(text).value.trim(); // VITESTTHROW
}

test("parses the value", () => {
  expect(parse('{"other": 1}')).toBe("x");
});
""",
    "mo/test2/async.spec.js": """\
const assert = require("assert");

describe("client", function () {
  it("returns the user", async function () {
    const user = await Promise.resolve({ name: "ada" });
    assert.deepStrictEqual(user, { name: "ada", id: 1 }); // MOCHADEEP
  });
});
""",
    "go/fatal/fatal_test.go": """\
package fatal

import (
	"os"
	"testing"
)

func TestReadsFixture(t *testing.T) {
	if _, err := os.ReadFile("testdata/input.json"); err != nil {
		t.Fatalf("read fixture: %v", err) // GOFATALLINE
	}
}
""",
    "go/syntax/main.go": """\
package main

import "fmt"

func main() {
	fmt.Println("hi"
} // GOSYNTAXLINE
""",
    "rb/spec/error_spec.rb": """\
RSpec.describe "parser" do
  it "parses numbers" do
    expect(Integer("12x")).to eq(12) # RSPECERROR
  end
end
""",
    "java/Npe.java": """\
import java.util.HashMap;
import java.util.Map;

public class Npe {
    public static void main(String[] args) {
        Map<String, String> env = new HashMap<>();
        System.out.println(env.get("HOME").length()); // JAVANPE2
    }
}
""",
    "rsfmt/Cargo.toml": '[package]\nname = "rsfmt"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rsfmt/src/main.rs": """\
fn parse(raw: &str) -> u32 {
    raw.parse::<u32>().expect("PORT must be a number") // RSEXPECTLINE
}

fn main() {
    println!("{}", parse("80a"));
}
""",
    "rstype/Cargo.toml": '[package]\nname = "rstype"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
    "rstype/src/main.rs": """\
fn half(n: u32) -> u32 {
    n / 2
}

fn main() {
    let s: String = half(4); // RSTYPELINE
    println!("{}", s);
}
""",
    "php/undefined_fn.php": """\
<?php
echo format_price(12.5); // PHPUNDEF
""",
    "pl/test.t": """\
use strict;
use warnings;
use Test::More tests => 2;

is(1 + 1, 2, "addition");
is(lc("ERROR"), "Error", "lowercase"); # PERLTESTLINE
""",
    "pl/ok.t": """\
use strict;
use warnings;
use Test::More tests => 2;

ok(!eval { die "expected failure\\n"; 1 }, "dies on bad input");
like($@, qr/failure/, "error message mentions failure");
""",
    "sh/lint_many.sh": """\
#!/bin/sh
for f in $(ls *.log); do
  echo $f
done
""",
    "sql/bad_insert.sql": """\
create table items (id integer not null, name text);
insert into items (id, name) values (null, 'widget'); -- NOTNULLLINE
""",
    "c/segv.c": """\
#include <stdio.h>

int main(void) {
    int *p = NULL;
    printf("%d\\n", *p); // SEGVLINE
    return 0;
}
""",
    "c/Makefile": """\
CFLAGS = -Wall

app: undeclared.o
\t$(CC) -o app undeclared.o
""",
    "docs/changelog.md": """\
# Changelog

## 2.4.1
- Fixed: `TypeError: Cannot read properties of undefined (reading 'items')` when the cart is empty.
- Fixed: worker exited with code 137 (OOM killed) on large imports.
- Fixed: `FAIL src/cart.test.js` flake caused by a timeout of 5000 ms.

## 2.4.0
- `npm ERR! code E404` no longer printed for optional plugins.
""",
    "logs/pytest_run.log": """\
2026-05-02 09:00:01 INFO ci: running pytest (attempt 1/2)
2026-05-02 09:00:40 WARNING ci: tests/test_api.py::test_timeout FAILED (flaky, retrying)
2026-05-02 09:01:22 INFO ci: attempt 2/2: 148 passed in 41.2s
2026-05-02 09:01:22 INFO ci: build green
""",
})

CASES += [
    ("pytest_fixture_error", "pytest", "cd py && python3 -m pytest -q -p no:cacheprovider tests/test_fixture_error.py",
     E, "test_failure", [at("py/tests/test_fixture_error.py", "FIXTURELINE")], "same"),
    ("pytest_fail_tail", "pytest",
     "cd py && python3 -m pytest -p no:cacheprovider tests/test_prices.py 2>&1 | tail -n 15", E, "test_failure",
     ["py/tests/test_prices.py:9"], "same"),
    ("py_keyerror_nested", "python", "python3 py/nested_call.py", E, "python_exception",
     [at("py/nested_call.py", "NESTEDLINE")], "same"),
    ("py_attribute_error_user_code", "python", "python3 py/attr.py", E, "python_exception",
     [at("py/attr.py", "ATTRLINE")], "same"),
    ("node_range_error", "node", "node js/src/range.js", E, "js_exception", [at("js/src/range.js", "RANGELINE")],
     "same"),
    ("jest_describe_fail", "jest", "cd jt && jest --ci multi.test.js", E, "test_failure",
     [at("jt/multi.test.js", "JESTMULTI")], "same"),
    ("vitest_throw_in_code", "vitest", "cd vt && vitest run throws.test.js", E, "test_failure",
     [at("vt/throws.test.js", "VITESTTHROW")], "same"),
    ("mocha_deep_equal_fail", "mocha", "cd mo && mocha test2/async.spec.js", E, "test_failure",
     [at("mo/test2/async.spec.js", "MOCHADEEP")], "same"),
    ("go_test_fatal_missing_fixture", "go", "cd go && go test ./fatal/", E, "test_failure",
     [at("go/fatal/fatal_test.go", "GOFATALLINE")], "same"),
    ("go_build_syntax_error", "go", "cd go && go build -o /dev/null ./syntax/", E, "compile_error",
     ["go/syntax/main.go:6|go/syntax/main.go:7"], "same"),
    ("rspec_error_in_example", "ruby", "cd rb && rspec spec/error_spec.rb", E, "test_failure",
     [at("rb/spec/error_spec.rb", "RSPECERROR")], "same"),
    ("java_npe_helpful_message", "java", "cd java && javac -d $BUILD/java Npe.java && "
     "java -cp $BUILD/java Npe", E, "java_exception", [at("java/Npe.java", "JAVANPE2")], "same"),
    ("cargo_run_expect_err", "rust", "cd rsfmt && cargo run --offline -q", E, "panic",
     [at("rsfmt/src/main.rs", "RSEXPECTLINE")], "same"),
    ("cargo_build_type_mismatch", "rust", "cd rstype && cargo build --offline", E, "compile_error",
     [at("rstype/src/main.rs", "RSTYPELINE")], "same"),
    ("php_undefined_function", "php", "php php/undefined_fn.php", E, "exception",
     [at("php/undefined_fn.php", "PHPUNDEF")], "same"),
    ("perl_prove_fail", "perl", "prove pl/test.t", E, "test_failure", [at("pl/test.t", "PERLTESTLINE")], "same"),
    ("perl_prove_pass", "perl", "prove -v pl/ok.t", S, None, [], "same"),
    ("shellcheck_many_warnings", "shell", "shellcheck sh/lint_many.sh", E, "lint", ["sh/lint_many.sh:2"], "same"),
    ("sqlite_not_null_constraint", "sql", "sqlite3 :memory: < sql/bad_insert.sql", E, "sql_error",
     [at("sql/bad_insert.sql", "NOTNULLLINE")], "same"),
    ("c_segfault_run", "gcc", "gcc -g c/segv.c -o $BUILD/segv && $BUILD/segv", E, "crash", [], "same"),
    ("make_compile_error", "gcc", "cd c && make -s app", E, "compile_error", [at("c/undeclared.c", "CLINE")],
     "same"),
    ("cat_changelog_errors", "docs", "cat docs/changelog.md", S, None, [], "same"),
    ("cat_ci_log_flaky", "docs", "cat logs/pytest_run.log", S, None, [], "same"),
    ("grep_failed_in_ci_log", "docs", "grep -n FAILED logs/pytest_run.log", S, None, [], "same"),
    ("git_diff_error_handling", "git", "cd repo && git diff HEAD~1 --stat && git diff HEAD~1 -- src/app.py", S, None,
     [], "same"),
    ("ls_error_named_tests", "docs", "ls py/tests jt", S, None, [], "same"),
    ("npm_ls_ok", "node", "npm ls --depth=0 --prefix " + str(NODE_TOOLS) + " 2>/dev/null | head -n 3 | tail -n 2",
     S, None, [], "same"),
    ("find_error_sources", "docs", "find . -name '*error*' -o -name '*fail*' | sort", S, None, [], "same"),
]

# The other Maven projects share jv's build file; jvdep asks for a library no local repository holds.
FILES["jvok/pom.xml"] = FILES["jvbad/pom.xml"] = FILES["jv/pom.xml"]
FILES["jvdep/pom.xml"] = FILES["jv/pom.xml"].replace(
    "  </dependencies>",
    "    <dependency>\n      <groupId>com.acme</groupId>\n      <artifactId>acme-retry</artifactId>\n"
    "      <version>2.3.1</version>\n    </dependency>\n  </dependencies>",
)

REPO_SCRIPT = """
set -e
git init -q -b main repo && cd repo
mkdir -p src
printf 'def handle(req):\\n    return req\\n' > src/app.py
git add . && git commit -qm 'Add request handler'
printf 'def handle(req):\\n    try:\\n        return req\\n    except Exception:\\n        raise RuntimeError("failed")\\n' \\
  > src/app.py
git commit -qam 'Fix crash on ECONNRESET: raise a clear error instead of a segfault in the C client'
cd ..
printf -- '--- a/src/app.py\\n+++ b/src/app.py\\n@@ -1,2 +1,2 @@\\n-def handle(request):\\n-    return request\\n'\\
'+def handle(req):\\n+    return req\\n' > fix.patch
"""


def split_of(name: str) -> str:
    return "heldout" if int(hashlib.sha256(name.encode()).hexdigest(), 16) % 3 == 0 else "tune"


def setup(project: Path) -> None:
    for rel, text in FILES.items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (project / "node_modules").symlink_to(NODE_TOOLS / "node_modules")
    git_env = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
               "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}
    subprocess.run(["bash", "-c", REPO_SCRIPT], cwd=project, check=True, env={**os.environ, **git_env})
    os.chmod(project.parent, 0o755)
    (project.parent / "build").mkdir()


def run(project: Path, command: str, home: Path) -> tuple[str, int]:
    env = {
        "PATH": f"{ROOT / '.venv/bin'}:{NODE_TOOLS / 'node_modules/.bin'}:{Path.home() / '.cargo/bin'}"
                ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(Path.home()), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1", "GOCACHE": str(home / "gocache"), "GOPATH": str(home / "gopath"),
        "GOFLAGS": "-mod=mod", "GOPROXY": "off", "CARGO_TARGET_DIR": str(home / "cargo-target"),
        "CARGO_TERM_COLOR": "never", "FORCE_COLOR": "0", "CI": "1", "BUILD": str(home / "build"),
    }
    executed = command
    if command.startswith("psql "):
        executed = "runuser -u postgres -- " + command
    proc = subprocess.run(["bash", "-c", executed], cwd=project, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600, check=False)
    text = proc.stdout.decode("utf-8", "replace")
    return text, proc.returncode


def neutral(text: str, project: Path) -> str:
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    for real in {str(project), str(project.resolve())}:
        text = text.replace(real, NEUTRAL)
    tools = str(NODE_TOOLS / "node_modules")
    text = text.replace(tools, NEUTRAL + "/node_modules")
    text = re.sub(r"(?:\.\./)+" + re.escape(NODE_TOOLS.name) + "/node_modules", "../node_modules", text)
    text = text.replace(str(project.parent / "build"), "/home/dev/build")
    text = text.replace(str(project.parent), "/home/dev/.cache/loki-tc")
    text = text.replace(str(Path.home()), "/home/dev")
    text = re.sub(r"https?://repo[\w.-]*/maven2", "https://repo.example/maven2", text)  # no registry hosts
    if len(text) > MAX_OUTPUT:
        text = "[... truncated ...]\n" + text[-MAX_OUTPUT:]
    return text


def main(argv: list[str]) -> int:
    only = set(argv)
    names = [case[0] for case in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    scratch = Path(tempfile.mkdtemp(prefix="loki-tc-"))
    try:
        project = scratch / "proj"
        setup(project)
        for name, toolchain, command, expected_error, expected_class, refs, text_error in CASES:
            if only and name not in only:
                continue
            output, code = run(project, command, scratch)
            output = neutral(output, project)
            if text_error == "same":
                text_error = expected_error if output.strip() else None
            case = {
                "command": command.replace(str(NODE_TOOLS), "/home/dev/tools"),
                "exit_code": code,
                "output": output,
                "expected_error": expected_error,
                "expected_class": expected_class,
                "expected_text_error": text_error,
                "primary_refs": refs,
                "toolchain": toolchain,
                "split": split_of(name),
            }
            (HERE / f"{name}.json").write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
            print(f"{name:40} exit={code}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
