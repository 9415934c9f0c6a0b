"""The run_qa.py-shaped test program's helper, imported from its own folder as run_qa.py imports utils_qa."""


def prepare_train_features(examples, tokenizer, max_len, stride):
    """Question + context, truncated on the context with a stride; start/end token positions of the answer (the
    CLS token when the answer is not in the window), as run_qa.py's prepare_train_features."""
    tok = tokenizer(
        examples["question"],
        examples["context"],
        truncation="only_second",
        max_length=max_len,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )
    sample_map = tok.pop("overflow_to_sample_mapping")
    starts, ends = [], []
    for i, offsets in enumerate(tok.pop("offset_mapping")):
        answers = examples["answers"][sample_map[i]]
        a0 = answers["answer_start"][0]
        a1 = a0 + len(answers["text"][0])
        seq = tok.sequence_ids(i)
        ctx = [k for k, s in enumerate(seq) if s == 1]
        if not ctx or offsets[ctx[0]][0] > a0 or offsets[ctx[-1]][1] < a1:
            starts.append(0)
            ends.append(0)
            continue
        starts.append(
            next(k for k in ctx if offsets[k][0] <= a0 < offsets[k][1] or offsets[k][0] >= a0)
        )
        ends.append(next(k for k in reversed(ctx) if offsets[k][0] < a1))
    tok["start_positions"], tok["end_positions"] = starts, ends
    return tok
