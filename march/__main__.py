from march.cli import main

raise SystemExit(main())
