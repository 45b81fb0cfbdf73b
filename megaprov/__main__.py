from megaprov.cli import main

raise SystemExit(main())
