from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("customer", models.CharField(max_length=100)),
                ("status", models.CharField(default="placed", max_length=20)),
                ("updates", models.IntegerField(default=0)),
            ],
        ),
    ]
