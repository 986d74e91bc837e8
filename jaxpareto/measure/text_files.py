"""Reading benchmark logs as text: UTF-8 (a leading byte-order mark allowed), CSV, JSONL, JSON.

A file in another encoding is refused, naming the line of its first bad byte; a file that cannot
be read or parsed is refused, naming the file. Every error is a `JaxparetoError` on the field
``file``.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pandas as pd

from jaxpareto.definitions.errors import JaxparetoError

#: Rows turned into a DataFrame at a time by `read_jsonl`: the dicts of one chunk live at once.
_JSONL_CHUNK = 65536


def _not_utf8(path: Path, error: UnicodeDecodeError) -> JaxparetoError:
    """The error for a file that is not UTF-8 text, naming the line of the first bad byte.

    ``error`` may come from a reader that decodes block by block (its offsets are then within a
    block), so the file is decoded again here to find the line.
    """
    line = None
    try:
        raw = path.read_bytes()
        skip = 3 if raw.startswith(codecs.BOM_UTF8) else 0
        raw[skip:].decode("utf-8")
    except UnicodeDecodeError as again:
        line, error = raw.count(b"\n", 0, skip + again.start) + 1, again
    except OSError:
        pass
    where = f" (line {line}: {error.reason})" if line else f" ({error.reason})"
    return JaxparetoError("file", f"{path} is not UTF-8 text{where}", "UTF-8, with or without a byte-order mark")


def _read_text(path: Path) -> str:
    """The file's text: UTF-8, a leading byte-order mark dropped."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    except OSError as error:
        raise JaxparetoError("file", f"{path} cannot be read ({error.strerror or error})") from None


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV file as pandas types it; only an empty field is missing.

    Columns are typed by pandas' parser (exact, as float()); one holding anything else stays
    text, checked value by value by `jaxpareto.measure.records`. "NaN", "NA" and "null" stay text
    and are refused as numbers there.

    Raises:
        JaxparetoError: the file is not UTF-8, cannot be read or is not CSV.
    """
    try:
        return pd.read_csv(path, encoding="utf-8-sig", keep_default_na=False, na_values=[""], low_memory=False)
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, OSError) as error:
        raise JaxparetoError("file", f"{path} is not a readable CSV file ({error})") from None


def read_jsonl(path: Path) -> pd.DataFrame:
    """A JSON-lines file, one JSON object per line (blank lines skipped), as a DataFrame.

    Raises:
        JaxparetoError: the file is not UTF-8 or cannot be read, or a line is not a JSON object.
    """
    frames, rows, n = [], [], 0
    loads = json.loads
    try:
        with path.open(encoding="utf-8-sig") as lines:
            for n, line in enumerate(lines, 1):
                if line.isspace():
                    continue
                try:
                    row = loads(line)
                except json.JSONDecodeError:
                    row = None
                if type(row) is not dict:
                    raise JaxparetoError("file", f"{path} line {n} is not a JSON object", "one JSON object per line")
                rows.append(row)
                if len(rows) == _JSONL_CHUNK:
                    frames.append(pd.DataFrame(rows))
                    rows = []
    except UnicodeDecodeError as error:  # raised for a block read ahead: _not_utf8 finds its line
        raise _not_utf8(path, error) from None
    except OSError as error:
        raise JaxparetoError("file", f"{path} cannot be read ({error.strerror or error})") from None
    if rows or not frames:
        frames.append(pd.DataFrame(rows))
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def read_json(path: Path) -> object:
    """The one JSON document of a file.

    Raises:
        JaxparetoError: the file is not UTF-8, cannot be read or is not one JSON document.
    """
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise JaxparetoError("file", f"{path} is not one JSON document ({error}); a file written with vLLM's "
                                     "--append-result holds several and must be split") from None
