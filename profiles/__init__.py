"""The bundled model profiles: one YAML file per model (a verbatim Hugging Face config.json under
`config`, with its source). A package only so that an installed wheel and an editable checkout find
them the same way (`importlib.resources.files("kvplan.profiles")`)."""
