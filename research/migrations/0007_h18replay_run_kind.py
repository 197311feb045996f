from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('research', '0006_h19_pool_baseline_shape'),
    ]

    operations = [
        migrations.AddField(
            model_name='benchmarkrun',
            name='kind',
            field=models.CharField(choices=[('level', 'Load level'), ('class-replay', 'Class replay')], db_index=True, default='level', help_text='class-replay: `summary` is the replay\'s JSON (research/class_metrics.py).', max_length=16),
        ),
    ]
