from megaprov.cli import main

# Guarded: worker processes (data prepare) import the main module and must not run the CLI again.
if __name__ == "__main__":
    raise SystemExit(main())
