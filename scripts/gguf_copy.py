"""What the scripts that rewrite a GGUF share: copying its metadata into a gguf.GGUFWriter in
order, and writing the result out.

Used by quantize_with_gguf.py, add_llama3_rope_freqs.py and make_qwen3_variant.py, whose outputs'
sha256 the quantization fixtures pin (scripts/make-quant-variants.sh checks them).
"""

from gguf import GGUFValueType as V


def copy_metadata(reader, writer, edit=None):
    """Adds every key of `reader` to `writer`, in the file's order, except those the writer writes
    itself (GGUF.*, general.architecture). edit(key, value) -> (key, value) may rename a key or
    change its value; the value keeps the key's type."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = V(field.types[0])
        value = field.contents()
        if edit is not None:
            key, value = edit(key, value)
        sub = V(field.types[1]) if vtype == V.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)


def write_out(writer):
    """Writes the header, the metadata and the tensors added so far, and closes the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
