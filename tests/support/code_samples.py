"""Code a reply carries in the code-block tests: a Python and a Rust snippet."""

PY = "def greet(name):\n    print(f'hi {name}')"
RS = "fn main() {\n    println!(\"hi\");\n}"
