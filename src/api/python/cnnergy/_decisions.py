"""Remembered optimizer decisions: a side table `optimizer_decisions` in the results database
(the SQLite file of `cnnergy sweep --db`; like the sweep's trial_claims it is outside the schema
version and the C++ readers ignore it), one row per job key (GPU model, driver, model signature,
batch size, precision, knob, objective, slowdown bound) holding the profile and the decision as
JSON. A row that cannot be read is ignored with a warning and profiled again."""
import datetime
import json
import os
import sqlite3
import warnings

_TABLE = ("CREATE TABLE IF NOT EXISTS optimizer_decisions (job_key TEXT PRIMARY KEY, "
          "gpu_name TEXT NOT NULL, driver_version TEXT NOT NULL, model_name TEXT NOT NULL, "
          "parameter_count INTEGER, batch_size INTEGER, precision TEXT NOT NULL, knob TEXT NOT NULL, "
          "objective TEXT NOT NULL, max_slowdown REAL, decision_json TEXT NOT NULL, "
          "profile_json TEXT NOT NULL, created TEXT NOT NULL, rechecked TEXT)")


def default_path():
    """$CNNERGY_RESULTS_DB, else ~/.local/share/cnnergy/results.db."""
    env = os.environ.get("CNNERGY_RESULTS_DB")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(base, "cnnergy", "results.db")


def job_key(fields):
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class DecisionStore:
    def __init__(self, path):
        self.path = os.fspath(path)

    def _connect(self):
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=30)
        con.execute(_TABLE)
        return con

    def load(self, fields):
        """The remembered decision (a dict) for these job fields, or None (none, or unreadable:
        then a warning says why)."""
        if not os.path.exists(self.path):
            return None
        try:
            con = self._connect()
            try:
                row = con.execute("SELECT decision_json FROM optimizer_decisions WHERE job_key = ?",
                                  (job_key(fields),)).fetchone()
            finally:
                con.close()
        except sqlite3.Error as e:
            warnings.warn("cnnergy: cannot read remembered decisions from %s (%s); profiling again"
                          % (self.path, e), RuntimeWarning, stacklevel=3)
            return None
        if row is None:
            return None
        try:
            d = json.loads(row[0])
            if not isinstance(d, dict) or not isinstance(d.get("setting"), dict):
                raise ValueError("no setting in it")
            for k, v in d["setting"].items():
                if not isinstance(k, str) or not isinstance(v, (int, float)):
                    raise ValueError("knob %r = %r" % (k, v))
            return d
        except ValueError as e:
            warnings.warn("cnnergy: the remembered decision in %s is corrupt (%s); ignoring it and "
                          "profiling again" % (self.path, e), RuntimeWarning, stacklevel=3)
            return None

    def save(self, fields, decision, profile):
        con = self._connect()
        try:
            with con:
                con.execute(
                    "INSERT OR REPLACE INTO optimizer_decisions (job_key, gpu_name, driver_version, "
                    "model_name, parameter_count, batch_size, precision, knob, objective, "
                    "max_slowdown, decision_json, profile_json, created, rechecked) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                    (job_key(fields), fields["gpu_name"], fields["driver_version"],
                     fields["model_name"], fields["parameter_count"], fields["batch_size"],
                     fields["precision"], fields["knob"], fields["objective"],
                     fields["max_slowdown"], json.dumps(decision), json.dumps(profile), _now()))
        finally:
            con.close()

    def mark_rechecked(self, fields, still_holds):
        """After a re-check: stamps the row, or drops it when the decision no longer holds (the
        next run profiles again)."""
        con = self._connect()
        try:
            with con:
                if still_holds:
                    con.execute("UPDATE optimizer_decisions SET rechecked = ? WHERE job_key = ?",
                                (_now(), job_key(fields)))
                else:
                    con.execute("DELETE FROM optimizer_decisions WHERE job_key = ?",
                                (job_key(fields),))
        finally:
            con.close()
