from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('research', '0016_rig_plan'),
    ]

    operations = [
        migrations.AlterField(
            model_name='benchmarkrun',
            name='kind',
            field=models.CharField(choices=[('level', 'Load level'), ('class-replay', 'Class replay'), ('probe', 'Share probe')], db_index=True, default='level', help_text="class-replay: `summary` is the replay's JSON (research/class_metrics.py); probe: `manage.py share_probe`'s JSON (`scenario` names the probe).", max_length=16),
        ),
    ]
