from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0011_worker_slot_files_pruned'),
    ]

    operations = [
        migrations.AddField(
            model_name='catalogmodel',
            name='description',
            field=models.CharField(blank=True, help_text="One line the chat page's model picker shows students (what the model is good for).", max_length=120),
        ),
    ]
