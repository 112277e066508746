"""A minimal ONNX protobuf reader (stdlib only) for bench/cpu_infer_profile.py: the graph input's shape
and the operators of a model, counted by domain, type and fused activation / residual input, so that
ONNX Runtime's optimised graph (optimized_model_filepath) shows what it fused.
Usage: python3 onnx_graph_summary.py MODEL.onnx"""
import json
import sys


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b, start, end):
    """(field number, wire type, value): varints as ints, length-delimited as (start, end) offsets."""
    i = start
    while i < end:
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = (i, i + 8), i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = (i, i + n), i + n
        elif wt == 5:
            v, i = (i, i + 4), i + 4
        else:
            raise ValueError("unsupported protobuf wire type %d at byte %d" % (wt, i))
        yield f, wt, v


def _str(b, span):
    return bytes(b[span[0]:span[1]]).decode("utf-8", "replace")


def _node(b, span):
    n = {"inputs": [], "op": "", "domain": "", "attrs": {}}
    for f, wt, v in _fields(b, *span):
        if f == 1 and wt == 2:
            n["inputs"].append(_str(b, v))
        elif f == 4 and wt == 2:
            n["op"] = _str(b, v)
        elif f == 7 and wt == 2:
            n["domain"] = _str(b, v)
        elif f == 5 and wt == 2:  # AttributeProto: name 1, s 4 (strings only are kept)
            name, sval = None, None
            for af, awt, av in _fields(b, *v):
                if af == 1 and awt == 2:
                    name = _str(b, av)
                elif af == 4 and awt == 2:
                    sval = _str(b, av)
            if name is not None and sval is not None:
                n["attrs"][name] = sval
    return n


def _shape(b, span):
    """ValueInfoProto -> (name, dims with None for a symbolic dimension)."""
    name, dims = "", []
    for f, wt, v in _fields(b, *span):
        if f == 1 and wt == 2:
            name = _str(b, v)
        elif f == 2 and wt == 2:  # TypeProto.tensor_type (1) -> shape (2) -> dim (1) -> dim_value (1)
            for tf, twt, tv in _fields(b, *v):
                if tf != 1 or twt != 2:
                    continue
                for sf, swt, sv in _fields(b, *tv):
                    if sf != 2 or swt != 2:
                        continue
                    for df, dwt, dv in _fields(b, *sv):
                        if df != 1 or dwt != 2:
                            continue
                        val = None
                        for xf, xwt, xv in _fields(b, *dv):
                            if xf == 1 and xwt == 0:
                                val = xv
                        dims.append(val)
    return name, dims


def op_key(n):
    key = (n["domain"] + ":" if n["domain"] and n["domain"] != "ai.onnx" else "") + n["op"]
    if "activation" in n["attrs"]:
        key += "[%s]" % n["attrs"]["activation"]
    if n["op"] in ("Conv", "FusedConv") and n["domain"] and len([i for i in n["inputs"] if i]) >= 4:
        key += "+sum"
    return key


def read_model(path):
    """{"input_shape": [N or None, C, H, W], "input_name", "ops": {key: count}}."""
    with open(path, "rb") as fh:
        b = memoryview(fh.read())
    graph = next((v for f, wt, v in _fields(b, 0, len(b)) if f == 7 and wt == 2), None)
    if graph is None:
        raise ValueError(path + ": no graph in this ONNX file")
    inits, inputs, ops = set(), [], {}
    for f, wt, v in _fields(b, *graph):
        if f == 1 and wt == 2:
            k = op_key(_node(b, v))
            ops[k] = ops.get(k, 0) + 1
        elif f == 5 and wt == 2:  # TensorProto: name is field 8
            for tf, twt, tv in _fields(b, *v):
                if tf == 8 and twt == 2:
                    inits.add(_str(b, tv))
        elif f == 11 and wt == 2:
            inputs.append(_shape(b, v))
    real = [(n, d) for n, d in inputs if n not in inits]
    if not real:
        raise ValueError(path + ": no graph input")
    return {"input_name": real[0][0], "input_shape": real[0][1], "ops": ops}


if __name__ == "__main__":
    print(json.dumps(read_model(sys.argv[1]), indent=1))
