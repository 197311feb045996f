from django.db import migrations


def create_pools(apps, schema_editor):
    Pool = apps.get_model("fleet", "Pool")
    Pool.objects.get_or_create(
        name="production", defaults={"description": "Serves the students' keys.", "may_lend": False}
    )
    Pool.objects.get_or_create(
        name="dev", defaults={"description": "Development and tests; lends its workers when production has none.",
                              "may_lend": True}
    )


class Migration(migrations.Migration):
    dependencies = [("fleet", "0001_initial")]
    operations = [migrations.RunPython(create_pools, migrations.RunPython.noop)]
