from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0008_h22keys_worker_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='rig',
            name='rehearsal',
            field=models.BooleanField(default=False, help_text='Its agent runs with NVML faked (telemetry = "rehearsal"): CPU workers and made-up GPU readings, never rig evidence. Set by its heartbeats.'),
        ),
    ]
