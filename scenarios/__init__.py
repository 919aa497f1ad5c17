"""The bundled scenarios `kvplan stress --scenario NAME` runs (`kvplan scenarios` lists them). A
package only so that an installed wheel and an editable checkout find them the same way
(`importlib.resources.files("kvplan.scenarios")`)."""
