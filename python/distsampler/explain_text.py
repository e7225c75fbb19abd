"""The text of each span of a step's explanation (docs/tokens.md, "Which documents made a
step"): the tokens the stream reads there (the file's, and the EOD the reader appends after a
document's last token), decoded by a `tokenizers` tokenizer. TokenStream.explain(tokenizer=)
adds it, and `distsampler tokens explain --tokenizer FILE` runs this module
(`python -m distsampler.explain_text --tokenizer FILE`) with {"explanation", "shards",
"append_eod"} as JSON on its standard input, printing the explanation with each span's text.
"""
import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence


def span_tokens(reader: Any, span: Dict[str, Any], eod: Optional[int]) -> List[int]:
    """The tokens of `span` as the stream reads them from `reader` (an IndexedSource): the
    file's, and `eod` after the document's last token when the reader appends it."""
    length = int(reader.length(span["document"]))
    end = min(span["end"], length)
    ids = reader.read(span["document"], span["begin"], end).tolist() \
        if span["begin"] < end else []
    if span["end"] > length and eod is not None:
        ids.append(int(eod))
    return [int(i) for i in ids]


def add_text(explained: Dict[str, Any], shards: Sequence[Sequence[str]], eod: Optional[int],
             tokenizer: Any) -> Dict[str, Any]:
    """Each span of `explained` (TokenStream.explain's dict) gains its `text`. `shards`: per
    source its shard prefixes as the plan numbers them; `eod`: the appended EOD id, or None;
    `tokenizer`: a ``tokenizers.Tokenizer`` or a tokenizer.json's path."""
    if isinstance(tokenizer, (str, os.PathLike)):
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(os.fspath(tokenizer))
    from . import _core
    readers: Dict[int, Any] = {}
    for row in explained["rows"]:
        for span in row["spans"]:
            source = span["source"]
            if source not in readers:
                readers[source] = _core.IndexedSource(list(shards[source]))
            span["text"] = tokenizer.decode(span_tokens(readers[source], span, eod),
                                            skip_special_tokens=False)
    return explained


def main(argv: Optional[Sequence[str]] = None) -> int:
    prog = os.environ.get("DISTSAMPLER_EXPLAIN_PROG", "python -m distsampler.explain_text")
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer.json")
    args = parser.parse_args(argv)
    try:
        payload = json.load(sys.stdin)
        out = add_text(payload["explanation"], payload["shards"], payload["append_eod"],
                       args.tokenizer)
    except Exception as e:  # one line, as the CLI's other errors
        print(f"{prog}: --tokenizer {args.tokenizer}: {e}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
