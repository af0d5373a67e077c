"""The TOML files the plugin reads, each declared once as a pydantic model: skew matrices
(``pytest_mooncake/data/skew/*.toml``), run matrices (``pytest_mooncake/data/matrices/*.toml``) and cluster manifests
(``pytest_mooncake/data/clusters/*.toml``). ``toml_documents`` reads a file and turns every validation
problem into one ``SchemaError`` naming the file and the field."""
